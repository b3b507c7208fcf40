#!/usr/bin/python3
"""Checks that a job flag has one default everywhere: --codec, --downlink-codec, --rounds
and --round-timeout as fedlgc-coordinator, fedlgc-sim and fedlgc-load print them in
--help, and as the compose file, the Swarm stack and the Kubernetes manifest give them to
the root coordinator (a compose default is the ${VAR:-default} of its flag), and as
docs/deployment.md describes the compose defaults; EXCEPTIONS
would name one that differs, with its reason (none does). Also that a bare edge client
dials where a bare coordinator listens. Exits 1 naming each disagreement.

    check-job-defaults.py BIN_DIR SOURCE_DIR
"""

import os
import re
import subprocess
import sys

FLAGS = ("--codec", "--downlink-codec", "--rounds", "--round-timeout")
# (binary, flag): its own default, for a default that must differ (with the reason here).
EXCEPTIONS = {}


def help_defaults(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s+(--[a-z-]+) [A-Z:\[\] \-0-9]*?=(\S+)", line)
        if m:
            found.setdefault(m.group(1), m.group(2))
    return found


def deployment_defaults(path, first_only=True):
    """The root coordinator's flags in a compose, stack or Kubernetes file: the first
    occurrence of each (the root comes first in each file)."""
    found = {}
    for line in open(path, encoding="utf-8"):
        for m in re.finditer(r"(--[a-z-]+)=([^\s'\"]+(?:\([^\s'\"]*\))?[^\s'\"]*)", line):
            flag, value = m.group(1), m.group(2)
            env = re.fullmatch(r"\\?\$\{[A-Z_]+:-(.*)\}", value)
            found.setdefault(flag, env.group(1) if env else value)
    return found


def described_defaults(path):
    """The compose defaults docs/deployment.md's "The job." item gives, as flags."""
    doc = open(path, encoding="utf-8").read()
    m = re.search(r"^- \*\*The job\.\*\*(.*?)(?=^- |^$)", doc, re.S | re.M)
    item = " ".join(m.group(1).split()) if m else ""
    found = {}
    for flag, pattern in (("--rounds", r"`FEDLGC_ROUNDS` \((\d+)\)"),
                          ("--round-timeout", r"`FEDLGC_ROUND_TIMEOUT` \((\d+) s\)"),
                          ("--codec", r"`FEDLGC_CODEC` and `FEDLGC_DOWNLINK_CODEC` \(both `([^`]+)`"),
                          ("--downlink-codec",
                           r"`FEDLGC_CODEC` and `FEDLGC_DOWNLINK_CODEC` \(both `([^`]+)`")):
        d = re.search(pattern, item)
        if d:
            found[flag] = d.group(1)
    return found


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bin_dir, src = sys.argv[1:]
    sources = {f"fedlgc-{b}": help_defaults(os.path.join(bin_dir, f"fedlgc-{b}"))
               for b in ("coordinator", "sim", "load")}
    for f in ("docker/docker-compose.yml", "docker/stack.yml", "docker/kubernetes/fedlgc.yaml"):
        sources[f] = deployment_defaults(os.path.join(src, f))
    # What the docs say the compose defaults are.
    sources["docs/deployment.md"] = described_defaults(os.path.join(src, "docs/deployment.md"))
    bad = []
    want = sources["fedlgc-coordinator"]
    for flag in FLAGS:
        if flag not in want:
            bad.append(f"fedlgc-coordinator --help shows no default for {flag}")
            continue
        for name, got in sources.items():
            expect = EXCEPTIONS.get((name, flag), want[flag])
            if got.get(flag) is None:
                bad.append(f"{name}: no default for {flag}")
            elif float_or(got[flag]) != float_or(expect):
                bad.append(f"{name}: {flag} defaults to {got[flag]}, "
                           f"fedlgc-coordinator to {want[flag]}" +
                           (f" (and {name} to {expect})" if expect != want[flag] else ""))
    edge = help_defaults(os.path.join(bin_dir, "fedlgc-edge"))
    if edge.get("--server") != want.get("--listen"):
        bad.append(f"a bare fedlgc-edge dials {edge.get('--server')}, a bare coordinator "
                   f"listens on {want.get('--listen')}")
    for b in bad:
        print("check-job-defaults:", b)
    if bad:
        sys.exit(1)
    print("check-job-defaults: " + ", ".join(f"{f}={want[f]}" for f in FLAGS) +
          f" in {len(sources)} places; bare clients dial {want['--listen']}")


def float_or(v):
    try:
        return float(v)
    except ValueError:
        return v


if __name__ == "__main__":
    main()
