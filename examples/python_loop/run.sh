#!/usr/bin/env bash
# Example (c): a job of 2 C++ clients (fedlgc-edge, SGD in C++) and 2 Python clients
# (client.py: Adam and augmentation in your own loop through fedlgc.run_client), all
# training model.py's Net on Fashion-MNIST over mTLS, 4-bit updates up and down. The
# coordinator serves the model file; no client is given it. ROUNDS, STEPS, TRAIN and OUT
# change it.
#   examples/python_loop/run.sh
set -euo pipefail
cd "$(dirname "$0")"
here=$(pwd)
bin=${FEDLGC_BIN:-../../build/bin}
py=${PYTHON:-python3}
out=${OUT:-out}
export PYTHONPATH="${FEDLGC_PYTHON:-$here/../../build/python}:${PYTHONPATH:-}"
rm -rf "$out/coordinator" "$out/clients"  # a fresh job each run
mkdir -p "$out"
"$py" ../fashion_npz.py "$out" --train "${TRAIN:-20000}" --test 2000
"$py" export.py "$out/net.pt"
../../scripts/gen-certs.sh "$out/certs" cpp-0 cpp-1 py-2 py-3 >/dev/null
port=${PORT:-7070}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
codec='zstd(qsgd(bits=4,norm=linf))'
"$bin/fedlgc-coordinator" --listen "127.0.0.1:$port" --state-dir "$out/coordinator" \
  --model "$out/net.pt" --test-data "npz:$out/test.npz" --rounds "${ROUNDS:-8}" --min-clients 4 \
  --local-steps "${STEPS:-60}" --batch 32 --lr 0.05 --codec "$codec" --downlink-codec "$codec" \
  --tls-ca "$out/certs/ca.pem" --tls-cert "$out/certs/server.pem" \
  --tls-key "$out/certs/server.key" --linger 2 >"$out/coordinator.log" 2>&1 &
coordinator=$!
pids+=("$coordinator")
for i in 0 1; do
  "$bin/fedlgc-edge" --server "127.0.0.1:$port" --id "cpp-$i" --state-dir "$out/clients" \
    --data "npz:$out/train.npz" --shard "$i" --num-shards 4 --tls-ca "$out/certs/ca.pem" \
    --tls-cert "$out/certs/cpp-$i.pem" --tls-key "$out/certs/cpp-$i.key" >"$out/cpp-$i.log" 2>&1 &
  pids+=($!)
done
for i in 2 3; do
  "$py" client.py --server "127.0.0.1:$port" --id "py-$i" --certs "$out/certs" \
    --data "$out/train.npz" --shard "$i" --shards 4 --state-dir "$out/clients" >"$out/py-$i.log" 2>&1 &
  pids+=($!)
done
if ! wait "$coordinator"; then
  echo "the coordinator failed; its log ends:" >&2
  tail -5 "$out/coordinator.log" >&2
  exit 1
fi
for p in "${pids[@]:1}"; do wait "$p"; done
"$py" - "$out/coordinator/rounds.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"round {r['round']:2d}: accuracy {r['accuracy']:.4f}, {r['participants']} clients, "
          f"uplink {r['uplink_bytes']:,} B ({r['raw_uplink_bytes'] / r['uplink_bytes']:.1f}x), "
          f"downlink {r['downlink_bytes']:,} B")
PY
tail -n 2 "$out"/py-*.log
