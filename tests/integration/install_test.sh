#!/usr/bin/env bash
# cmake --install into an empty prefix, then the README's first job (fedlgc-sim, which
# starts a coordinator and clients and makes their certificates) run from that prefix
# alone: in a mount namespace where the source and build trees are empty folders, with
# PATH holding only the prefix and the system. Also: every tool and its man page, the
# Python package importable from the prefix, the deployment files under share/fedlgc.
#   install_test.sh BUILD_DIR SOURCE_DIR        (exit 77: skipped, not root)
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "install_test: needs root and mount namespaces to hide the build tree; skipped"
  exit 77
fi
prefix=$(mktemp -d /tmp/fedlgc-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >"$prefix.log" 2>&1 || { cat "$prefix.log"; exit 1; }
rm -f "$prefix.log"
fail() { echo "install_test: $*" >&2; exit 1; }
for t in coordinator edge sim load export codec report; do
  [ -x "$prefix/bin/fedlgc-$t" ] || fail "no bin/fedlgc-$t"
  grep -q '^\.SH OPTIONS' "$prefix/share/man/man1/fedlgc-$t.1" || fail "no man page for fedlgc-$t"
done
for f in docker/docker-compose.yml docker/grafana/dashboards/fedlgc.json \
  docker/prometheus/prometheus.yml docker/prometheus/alerts.yml scripts/gen-certs.sh; do
  [ -e "$prefix/share/fedlgc/$f" ] || fail "no share/fedlgc/$f"
done
pydir=$(ls -d "$prefix"/lib/python3*/dist-packages 2>/dev/null | head -1)
[ -f "$pydir/fedlgc/__init__.py" ] || fail "no Python package under $prefix/lib"

# From here on the source and build trees are empty: only the prefix and the system.
work=$(mktemp -d /tmp/fedlgc-install-run-XXXXXX)
trap 'rm -rf "$prefix" "$work"' EXIT
unshare -m bash -s "$src" "$build" "$prefix" "$pydir" "$work" <<'INNER'
set -euo pipefail
src=$1 build=$2 prefix=$3 pydir=$4 work=$5
mount -t tmpfs none "$build"
mount -t tmpfs none "$src"
[ ! -e "$src/scripts/gen-certs.sh" ] || { echo "install_test: the source tree is still visible"; exit 1; }
cd "$work"
export PATH="$prefix/bin:/usr/bin:/bin" PYTHONPATH="$pydir"
unset FEDLGC_BUILD_DIR
fedlgc-sim --version
fedlgc-sim --rounds 2 --train-limit 2000 --eval-limit 1000 --report report.json >sim.log 2>&1 ||
  { cat sim.log; exit 1; }
grep -q '^final accuracy' sim.log || { cat sim.log; exit 1; }
python3 - <<'PY'
import json
import fedlgc
import fedlgc.codecs
assert fedlgc.__file__.startswith(__import__("os").environ["PYTHONPATH"]), fedlgc.__file__
r = json.load(open("report.json"))
assert len(r["rounds"]) == 2, r["rounds"]
print("install_test: the job ran from the prefix:", r["summary"]["final_accuracy"] if "final_accuracy" in r["summary"] else r["summary"])
PY
INNER
echo "install_test: installed into an empty prefix and ran the job from it alone"
