#!/usr/bin/env bash
# Static checks of the deployment in docker/ (no Docker engine needed):
#   compose files (alone, with each overlay, and a generated federation) through
#   `docker-compose config -q` and dclint; the Swarm stack (the script's output, `docker
#   stack config`); Dockerfiles through dockerfilelint and our own
#   rules (tagged base images, a non-root user and a healthcheck in every final stage);
#   Prometheus config and alert rules through promtool, alert unit tests; the Grafana
#   dashboard (JSON, unique panel ids, the provisioned datasource, every PromQL parses).
# Exits 77 (skip) when a tool is missing; scripts/setup.sh installs them all.
set -euo pipefail
cd "$(dirname "$0")"
for tool in docker-compose dclint dockerfilelint promtool python3 yamllint; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool not installed (scripts/setup.sh installs it)"
    exit 77
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

echo "-- yamllint"
yamllint -d '{extends: relaxed, rules: {line-length: {max: 120}}}' \
  docker-compose*.yml stack.yml kubernetes/fedlgc.yaml kubernetes/edges.yaml prometheus/*.yml \
  grafana/provisioning/*/*.yml

echo "-- docker-compose config"
for overlay in "" docker-compose.lossy.yml docker-compose.gpu.yml; do
  FEDLGC_CLIENTS=4 FEDLGC_GPU_SHARD=3 docker-compose -f docker-compose.yml ${overlay:+-f "$overlay"} config -q ||
    fail "docker-compose config: docker-compose.yml ${overlay}"
done
# A generated federation: 5 CPU clients on lossy links and 2 GPU ones, in a copy.
cp -r . "$tmp/docker"
mkdir -p "$tmp/scripts" && cp ../scripts/gen-certs.sh "$tmp/scripts/"
"$tmp/docker/gen-edges.sh" 5 --gpu 2 --lossy >/dev/null
(cd "$tmp/docker" && docker-compose -f docker-compose.yml -f docker-compose.edges.yml config -q) ||
  fail "generated docker-compose.edges.yml"
services=$(cd "$tmp/docker" && docker-compose -f docker-compose.yml -f docker-compose.edges.yml \
  config --services | sort | tr '\n' ' ')
[ "$services" = "coordinator edge-1 edge-2 edge-3 edge-4 edge-5 edge-gpu-1 edge-gpu-2 grafana prometheus " ] ||
  fail "generated services: $services"
grep -q '"edge-gpu-2:9464"' "$tmp/docker/prometheus/targets/edges.json" || fail "generated targets"
grep -q '^FEDLGC_CLIENTS=7$' "$tmp/docker/.env" || fail "generated .env"

echo "-- stack.yml and the Kubernetes manifests"
(cd "$tmp/docker" && ./gen-stack.sh >/dev/null)
cmp -s stack.yml "$tmp/docker/stack.yml" ||
  fail "docker/stack.yml is not what docker/gen-stack.sh writes: run docker/gen-stack.sh"
if docker stack config --help >/dev/null 2>&1; then
  (cd "$tmp/docker" && docker stack config -c stack.yml >/dev/null) || fail "docker stack config"
fi
# (tests/deployment/k8s_check.py validates docker/kubernetes against the API's schemas.)

echo "-- dclint"
dclint docker-compose.yml docker-compose.lossy.yml docker-compose.gpu.yml \
  "$tmp/docker/docker-compose.edges.yml" -q

echo "-- dockerfilelint"
dockerfilelint Dockerfile Dockerfile.cuda >"$tmp/dfl.txt" || {
  cat "$tmp/dfl.txt"
  fail dockerfilelint
}
python3 - Dockerfile Dockerfile.cuda <<'PY'
import re, sys
for path in sys.argv[1:]:
    stages, finals, current, args, copied = set(), {}, None, {}, set()
    lines = open(path).read().replace("\\\n", " ").splitlines()
    for line in lines:
        m = re.match(r"\s*ARG\s+(\w+)=(\S+)", line)
        if m and current is None:
            args[m.group(1)] = m.group(2)
        copied.update(re.findall(r"--from=(\S+)", line))
        m = re.match(r"\s*FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            image, name = m.group(1), m.group(2)
            # FROM ${ARG}: the stage or image its default names
            image = re.sub(r"\$\{(\w+)\}", lambda a: args.get(a.group(1), a.group(0)), image)
            if image not in stages and image != "scratch" and \
                    not re.search(r":[^/]+$|@sha256:", image):
                sys.exit(f"{path}: base image {image} has no tag")
            if name:
                stages.add(name)
            current = name or image
            finals[current] = {"user": None, "health": False, "from": image}
            continue
        if current is None:
            continue
        if re.match(r"\s*USER\s+", line):
            finals[current]["user"] = line.split()[1]
        if re.match(r"\s*HEALTHCHECK\s+", line):
            finals[current]["health"] = True
    # Stages nothing else builds on are the images people run.
    # (a stage FROM scratch only holds files for others to copy)
    used = {f["from"] for f in finals.values()} | copied
    used |= {n for n, f in finals.items() if f["from"] == "scratch"}
    for name, f in finals.items():
        if name in used or name == "build":
            continue
        if f["user"] in (None, "root", "0"):
            sys.exit(f"{path}: stage {name} runs as root")
        if not f["health"]:
            sys.exit(f"{path}: stage {name} has no HEALTHCHECK")
    print(f"{path}: tagged bases; final stages {sorted(n for n in finals if n not in used and n != 'build')} non-root with healthchecks")
PY

echo "-- promtool"
promtool check config prometheus/prometheus.yml
promtool check rules prometheus/alerts.yml
promtool test rules prometheus/alerts_test.yml

echo "-- dashboard"
python3 - grafana/dashboards/fedlgc.json grafana/provisioning/datasources/prometheus.yml \
  "$tmp/panels.yml" <<'PY'
import json, re, sys
dash = json.load(open(sys.argv[1]))
uid = re.search(r"uid:\s*(\S+)", open(sys.argv[2]).read()).group(1)
ids, rules = set(), []
for p in dash["panels"]:
    if p["id"] in ids:
        sys.exit(f"duplicate panel id {p['id']}")
    ids.add(p["id"])
    if p["type"] == "row":
        continue
    if p["datasource"]["uid"] != uid:
        sys.exit(f"panel '{p['title']}' uses datasource {p['datasource']['uid']}, not {uid}")
    if not p.get("targets"):
        sys.exit(f"panel '{p['title']}' has no query")
    for t in p["targets"]:
        expr = t["expr"].replace("$__rate_interval", "1m").replace("$client", ".*")
        if "$" in expr:
            sys.exit(f"panel '{p['title']}': unknown variable in {t['expr']}")
        rules.append(f"      - record: panel_{p['id']}_{t['refId']}\n        expr: {json.dumps(expr)}\n")
first = [p for p in dash["panels"] if p["type"] != "row"][0]
if "Uplink bandwidth per client" not in first["title"]:
    sys.exit("the first panel must be uplink bandwidth per client")
open(sys.argv[3], "w").write("groups:\n  - name: panels\n    rules:\n" + "".join(rules))
print(f"{len(ids)} panels, {len(rules)} queries")
PY
promtool check rules "$tmp/panels.yml" >/dev/null || fail "a dashboard query does not parse"

echo "-- shell scripts"
for s in gen-edges.sh lossy-link.sh collect-libs.sh check.sh base-images.sh stage-prebuilt.sh; do bash -n "$s"; done
echo "PASS: deployment static checks"
