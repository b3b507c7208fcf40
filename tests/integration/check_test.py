#!/usr/bin/python3
"""--check of every job binary (core/preflight.h), run as a user runs it.

    check_test.py BIN_DIR SOURCE_DIR

A good configuration passes (exit 0) and leaves nothing behind; a configuration with
several faults at once names each of them on its own line (exit 1); certificates are made
by the project's own script and checked for a key that is not theirs and a CA that did not
sign them. Then a fedlgc-sim run without --run-dir removes its working files and keeps the
exported model.
"""
import os
import re
import socket
import subprocess
import sys
import tempfile

BIN, SRC = sys.argv[1], sys.argv[2]
# Temporary run folders go here ($TMPDIR), where other tests running beside this one put
# nothing.
SCRATCH = tempfile.mkdtemp(prefix="check-test-tmp-")
ENV = dict(os.environ, TMPDIR=SCRATCH)


def run(tool, *args, expect):
    p = subprocess.run([os.path.join(BIN, tool), *args], capture_output=True, text=True,
                       timeout=300, env=ENV)
    out = p.stdout + p.stderr
    assert p.returncode == expect, f"{tool} {' '.join(args)}: exit {p.returncode}, not {expect}\n{out}"
    return out


def lines(out):
    """{item: (tag, text)} of --check's lines."""
    found = {}
    for line in out.splitlines():
        m = re.match(r"^(ok|FAIL|-)\s+(\S+(?: \S+)*?)\s{2,}(.*)$", line)
        if m:
            found[m.group(2)] = (m.group(1), m.group(3))
    return found


def expect_fail(found, item, words):
    tag, text = found.get(item, (None, ""))
    assert tag == "FAIL", f"{item}: {tag} {text!r}, expected a failure"
    assert words in text, f"{item}: {text!r} does not say {words!r}"


def certs(folder):
    subprocess.run(["bash", os.path.join(SRC, "scripts/gen-certs.sh"), folder], check=True,
                   capture_output=True)
    return folder


def main():
    tmp = tempfile.mkdtemp(prefix="check-test-")
    a = certs(os.path.join(tmp, "a"))
    b = certs(os.path.join(tmp, "b"))
    state = os.path.join(tmp, "state")

    # A usable coordinator: every item ok or not applicable, and nothing written.
    out = run("fedlgc-coordinator", "--check", "--model", "mlp", "--test-data", "synthetic:200",
              "--tls-ca", f"{a}/ca.pem", "--tls-cert", f"{a}/server.pem", "--tls-key",
              f"{a}/server.key", "--state-dir", state, "--listen", "127.0.0.1:0",
              "--export", f"{tmp}/out/model.pt", expect=0)
    found = lines(out)
    for item in ("options", "model", "test data", "checkpoint", "round protocol", "downlink",
                 "certificates", "listen", "export", "state folder"):
        assert found.get(item, ("",))[0] == "ok", f"{item}: {found.get(item)}\n{out}"
    assert "CN = coordinator" in found["certificates"][1], out
    assert re.search(r"0 failed", out), out
    assert not os.path.exists(state) and not os.path.exists(f"{tmp}/out"), "--check wrote files"

    # Four faults at once, each on its own line.
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    port = held.getsockname()[1]
    out = run("fedlgc-coordinator", "--check", "--model", "mlp", "--test-data",
              f"npz:{tmp}/missing.npz", "--tls-ca", f"{a}/ca.pem", "--tls-cert",
              f"{a}/server.pem", "--tls-key", f"{a}/ca.key", "--listen", f"127.0.0.1:{port}",
              "--tensorboard", f"{a}/ca.pem/tb", "--state-dir", state, expect=1)
    held.close()
    found = lines(out)
    expect_fail(found, "test data", "missing.npz")
    expect_fail(found, "certificates", "does not belong to the certificate")
    expect_fail(found, "listen", "cannot listen there")
    expect_fail(found, "tensorboard", "is not a folder")
    assert "4 failed" in out, out
    assert found["checkpoint"][0] == "-", out  # needs the test data

    # A certificate another CA signed.
    out = run("fedlgc-coordinator", "--check", "--model", "mlp", "--test-data", "none",
              "--tls-ca", f"{a}/ca.pem", "--tls-cert", f"{b}/server.pem", "--tls-key",
              f"{b}/server.key", "--listen", "127.0.0.1:0", "--state-dir", state, expect=1)
    expect_fail(lines(out), "certificates", "does not verify against the CA")
    assert "--check" not in run("fedlgc-coordinator", "--check", "--print-config", expect=0)

    # The edge client: hosted clients, their data split, and a model file that is not there.
    out = run("fedlgc-edge", "--check", "--insecure", "--client-ids", "0-3", "--num-shards", "4",
              "--data", "synthetic:100", "--state-dir", state, expect=0)
    found = lines(out)
    assert found["client ids"] == ("ok", "4 clients; the first checked below"), out
    assert "25 examples in this shard" in found["data"][1], out
    out = run("fedlgc-edge", "--check", "--insecure", "--data", "synthetic:100", "--model",
              f"{tmp}/none.pt", "--state-dir", state, expect=1)
    expect_fail(lines(out), "model", "none.pt")
    assert not os.path.exists(state), "--check wrote files"

    # fedlgc-sim and fedlgc-load: their own items and their coordinator's, no folder made.
    out = run("fedlgc-sim", "--check", "--clients", "2", "--model", "mlp", expect=0)
    found = lines(out)
    assert "2 shards" in found["client data"][1] and found["model"][0] == "ok", out
    out = run("fedlgc-sim", "--check", "--clients", "2", "--link", "rate=fast", expect=1)
    expect_fail(lines(out), "link", "rate")
    out = run("fedlgc-load", "--check", "--clients", "3", "--model", "mlp", expect=0)
    assert lines(out)["round protocol"][0] == "ok", out
    assert os.listdir(SCRATCH) == [], f"--check made folders in $TMPDIR: {os.listdir(SCRATCH)}"
    out = run("fedlgc-load", "--no-check", expect=105)
    assert "--no-verify-aggregate" in out, out
    out = run("fedlgc-export", "--check", "--state-dir", state, "-o", f"{tmp}/m.pt", expect=1)
    expect_fail(lines(out), "state folder", "no such folder")

    # A run without --run-dir keeps the exported model and drops its working files.
    out = run("fedlgc-sim", "--clients", "2", "--rounds", "1", "--model", "mlp", "--train-limit",
              "400", "--eval-limit", "200", "--quiet", expect=0)
    m = re.search(r"^run folder: (\S+), working files removed \(kept: ([^;]*);", out, re.M)
    assert m and os.path.dirname(m.group(1)) == SCRATCH, out
    left = sorted(os.listdir(m.group(1)))
    assert left == ["model.json", "model.npz", "model.pt"], left
    assert m.group(2) == "model.json, model.npz, model.pt", m.group(2)
    subprocess.run(["rm", "-rf", SCRATCH, tmp], check=True)
    print("check_test: ok")


if __name__ == "__main__":
    main()
