#!/usr/bin/env python3
"""Debian's real Prometheus against a running federation, with the shipped config.

Starts a coordinator and three edge clients over mTLS on 127.0.0.1 (synthetic data, a
fp32 warm-up round then 4-bit QSGD), copies docker/prometheus (prometheus.yml, alert rules)
and points its file_sd target files at the processes' exposers, starts `prometheus`, and
once rounds have been scraped evaluates every query of the Grafana dashboard through the
HTTP API: each must return at least one series. Also checks that every target is up and
that the alert rules loaded and evaluate without errors.

  prometheus_test.py BIN_DIR SOURCE_DIR      (exit 77: skipped, prometheus not installed)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from ports import free_port  # noqa: E402 (below the kernel's ephemeral range)

RATE_INTERVAL = "20s"  # stands in for Grafana's $__rate_interval (scrapes every 1 s here)




def wait_for(what, predicate, timeout):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    sys.exit(f"FAIL: timed out waiting for {what}")


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bin_dir, src = sys.argv[1], sys.argv[2]
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("SKIP: the prometheus server is not installed (scripts/setup.sh installs it)")
        return 77
    tmp = tempfile.mkdtemp(prefix="fedlgc-prom-")
    procs = []

    def spawn(args, log):
        procs.append(subprocess.Popen(args, stdout=open(os.path.join(tmp, log), "w"),
                                      stderr=subprocess.STDOUT, start_new_session=True))
        return procs[-1]

    try:
        certs = os.path.join(tmp, "certs")
        clients = ["client-0", "client-1", "client-2"]
        subprocess.run([os.path.join(src, "scripts/gen-certs.sh"), certs] + clients,
                       check=True, stdout=subprocess.DEVNULL)
        port_file = os.path.join(tmp, "coordinator.port")
        spawn([os.path.join(bin_dir, "fedlgc-coordinator"), "--listen=127.0.0.1:0",
               "--metrics-listen=127.0.0.1:0", f"--port-file={port_file}",
               f"--state-dir={tmp}/coordinator", "--model=mlp", "--rounds=1000",
               "--min-clients=3", "--codec-warmup=fp32", "--codec=qsgd(bits=4)",
               "--local-steps=5", "--test-data=synthetic:300", "--round-timeout=30",
               "--ratio-target=4", f"--tls-ca={certs}/ca.pem", f"--tls-cert={certs}/server.pem",
               f"--tls-key={certs}/server.key"], "coordinator.log")
        ports = wait_for("the coordinator's ports", lambda: os.path.exists(port_file) and
                         open(port_file).read().split(), 60)
        grpc_port, coord_metrics = int(ports[0]), int(ports[1])
        edge_metrics = []
        for i, cid in enumerate(clients):
            port = free_port()
            edge_metrics.append(port)
            spawn([os.path.join(bin_dir, "fedlgc-edge"), f"--server=127.0.0.1:{grpc_port}",
                   f"--id={cid}", f"--state-dir={tmp}/clients", "--data=synthetic:600",
                   f"--shard={i}", "--num-shards=3", f"--metrics-listen=127.0.0.1:{port}",
                   f"--tls-ca={certs}/ca.pem", f"--tls-cert={certs}/{cid}.pem",
                   f"--tls-key={certs}/{cid}.key", "--device=auto"], f"{cid}.log")

        # The shipped Prometheus config, verbatim but for a 1 s scrape interval, with
        # its file_sd target files pointing at the processes above.
        prom_dir = os.path.join(tmp, "prometheus")
        shutil.copytree(os.path.join(src, "docker/prometheus"), prom_dir)
        conf = os.path.join(prom_dir, "prometheus.yml")
        text = open(conf).read()
        for key in ("scrape_interval", "evaluation_interval"):
            assert f"{key}: 5s" in text, key
            text = text.replace(f"{key}: 5s", f"{key}: 1s")
        open(conf, "w").write(text)
        json.dump([{"targets": [f"127.0.0.1:{coord_metrics}"], "labels": {"role": "coordinator"}}],
                  open(os.path.join(prom_dir, "targets/coordinator.json"), "w"))
        json.dump([{"targets": [f"127.0.0.1:{p}" for p in edge_metrics], "labels": {"role": "edge"}}],
                  open(os.path.join(prom_dir, "targets/edges.json"), "w"))
        prom_port = free_port()
        spawn([prometheus, f"--config.file={conf}", f"--storage.tsdb.path={tmp}/tsdb",
               f"--web.listen-address=127.0.0.1:{prom_port}"], "prometheus.log")
        api = f"http://127.0.0.1:{prom_port}/api/v1"

        def query(expr):
            url = f"{api}/query?" + urllib.parse.urlencode({"query": expr})
            try:
                return get_json(url)
            except Exception:  # not listening yet
                return None

        def up_targets():
            r = query("up")
            return r and r["status"] == "success" and sum(
                1 for s in r["data"]["result"] if s["value"][1] == "1") == 4

        wait_for("all 4 targets up", up_targets, 60)
        rounds = os.path.join(tmp, "coordinator/rounds.jsonl")
        wait_for("5 committed rounds", lambda: os.path.exists(rounds) and
                 len(open(rounds).read().splitlines()) >= 5, 120)
        time.sleep(6)  # a few more scrapes after those rounds

        dash = json.load(open(os.path.join(src, "docker/grafana/dashboards/fedlgc.json")))
        failures, checked = [], 0
        for panel in dash["panels"]:
            for t in panel.get("targets", []):
                expr = t["expr"].replace("$__rate_interval", RATE_INTERVAL).replace("$client", ".*")
                r = query(expr)
                checked += 1
                if r and r["status"] == "success" and not r["data"]["result"] and \
                        any(k in panel["title"] for k in
                            ("(LSGD jobs)", "(SGP jobs)", "(buffered rounds)", "(DP jobs)",
                             "(--eval clients jobs)")):
                    # Another mode's panel: this synchronous FedAvg job exports no such
                    # series. The integration tests check those metrics in LSGD, SGP,
                    # buffered, DP and federated evaluation jobs.
                    print(f"ok   {panel['title']} [{t['refId']}]: valid, empty in a FedAvg job")
                    continue
                if not r or r["status"] != "success" or not r["data"]["result"]:
                    failures.append(f"'{panel['title']}' {t['refId']}: {expr} -> {r}")
                    continue
                sample = ", ".join(f"{s['metric'].get('client') or s['metric'].get('codec') or s['metric'].get('reason') or ''}"
                                   f"={float(s['value'][1]):.4g}" for s in r["data"]["result"][:3])
                print(f"ok   {panel['title']} [{t['refId']}]: {len(r['data']['result'])} series ({sample})")
        rules = get_json(f"{api}/rules")["data"]["groups"]
        alerts = [r for g in rules for r in g["rules"] if r["type"] == "alerting"]
        bad = [r["name"] for r in alerts if r["health"] != "ok"]
        shipped = open(os.path.join(src, "docker/prometheus/alerts.yml")).read().count("- alert:")
        if len(alerts) != shipped or bad:
            failures.append(f"alert rules: {len(alerts)} loaded, unhealthy: {bad}")
        else:
            print(f"ok   {len(alerts)} alert rules loaded and evaluating")
        if failures:
            print("\n".join("FAIL " + f for f in failures))
            return 1
        print(f"PASS: {checked} dashboard queries returned data from Prometheus")
        return 0
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
