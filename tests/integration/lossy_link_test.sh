#!/usr/bin/env bash
# A federation over a real lossy link: the coordinator and two clients in their own
# network namespaces joined by a veth pair, with tbf capping the rate at 10 Mbit/s and an
# nftables rule dropping 5% of the clients' packets at random. The run must finish every
# round with both clients. Skips (exit 77) where namespaces are not permitted.
#   lossy_link_test.sh BIN_DIR SOURCE_DIR
set -uo pipefail
bin=$1
src=$2
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
command -v nft >/dev/null || skip "nftables (nft) is not installed"
command -v tc >/dev/null || skip "tc is not installed"

tag=fl$$
srv=${tag}s
cli=${tag}c
work=$(mktemp -d)
cleanup() {
  ip netns pids "$srv" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids "$cli" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$srv" 2>/dev/null
  ip netns del "$cli" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$srv" 2>/dev/null || skip "ip netns add is not permitted here"
ip netns add "$cli" || skip "ip netns add is not permitted here"
ip link add "${tag}a" type veth peer name "${tag}b" || skip "cannot create a veth pair"
ip link set "${tag}a" netns "$srv"
ip link set "${tag}b" netns "$cli"
ip -n "$srv" addr add 10.231.7.1/24 dev "${tag}a"
ip -n "$cli" addr add 10.231.7.2/24 dev "${tag}b"
for ns in "$srv" "$cli"; do ip -n "$ns" link set lo up; done
ip -n "$srv" link set "${tag}a" up
ip -n "$cli" link set "${tag}b" up
# 10 Mbit/s each way (tbf), and 5% random loss on the client side's egress (nftables).
ip netns exec "$srv" tc qdisc add dev "${tag}a" root tbf rate 10mbit burst 32kbit latency 400ms || skip "tbf unavailable"
ip netns exec "$cli" tc qdisc add dev "${tag}b" root tbf rate 10mbit burst 32kbit latency 400ms || skip "tbf unavailable"
ip netns exec "$cli" nft -f - <<NFT || skip "nftables unavailable"
table inet lossy {
  chain out {
    type filter hook output priority 0; policy accept;
    ip daddr 10.231.7.1 numgen random mod 100 < 5 counter drop
  }
}
NFT

SERVER_SANS=IP:10.231.7.1 "$src/scripts/gen-certs.sh" "$work/certs" client-0 client-1 >/dev/null
c=$work/certs
ip netns exec "$srv" "$bin/fedlgc-coordinator" --listen 10.231.7.1:7000 --metrics-listen= \
  --state-dir "$work/coordinator" --model mlp --rounds 3 --min-clients 2 --test-data synthetic:500 \
  --codec 'qsgd(bits=8)' --downlink-codec fp32 --local-steps 20 --chunk-bytes 65536 --round-timeout 120 \
  --tls-ca "$c/ca.pem" --tls-cert "$c/server.pem" --tls-key "$c/server.key" >"$work/coordinator.log" 2>&1 &
coord=$!
for i in 0 1; do
  ip netns exec "$cli" "$bin/fedlgc-edge" --server 10.231.7.1:7000 --id client-$i --state-dir "$work/clients" \
    --tls-ca "$c/ca.pem" --tls-cert "$c/client-$i.pem" --tls-key "$c/client-$i.key" \
    --tls-server-name 10.231.7.1 --data synthetic:3000 --shard $i --num-shards 2 \
    --backoff-max 1 >"$work/client-$i.log" 2>&1 &
done
start=$(date +%s)
if ! timeout 240 tail --pid=$coord -f /dev/null; then
  echo "FAIL: the federation did not finish in 240 s"; tail -n 20 "$work"/*.log; exit 1
fi
wait $coord
rc=$?
elapsed=$(( $(date +%s) - start ))
dropped=$(ip netns exec "$cli" nft list table inet lossy | grep -o 'packets [0-9]*' | awk '{print $2}')
read -r rounds full < <(python3 - "$work/coordinator/rounds.jsonl" <<'PY'
import json, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
except OSError:
    rows = []
print(len(rows), sum(1 for r in rows if r["participants"] == 2))
PY
)
echo "lossy link: exit $rc, $rounds rounds ($full with both clients) in ${elapsed}s, $dropped packets dropped"
cat "$work/coordinator/rounds.jsonl"
[ "$rc" -eq 0 ] && [ "$rounds" -eq 3 ] && [ "$full" -eq 3 ] && [ "${dropped:-0}" -gt 0 ] || {
  echo "FAIL"; tail -n 20 "$work"/*.log; exit 1; }
echo "PASS"
