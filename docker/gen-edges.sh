#!/usr/bin/env bash
# Prepares a compose federation of N CPU edge clients (and M GPU ones):
#   - certificates in docker/certs (scripts/gen-certs.sh; existing ones are kept), keys
#     readable by the containers' user (uid 10001) only;
#   - docker/docker-compose.edges.yml with every edge client (edge-1..N, edge-gpu-1..M),
#     each with its shard of the training set and its certificate;
#   - docker/prometheus/targets/edges.json, so Prometheus scrapes them all;
#   - docker/.env with FEDLGC_CLIENTS (the coordinator's quorum and the shard count) and
#     FEDLGC_GPU_SHARD (the shard of edge-gpu-1 in docker-compose.gpu.yml).
#
#   docker/gen-edges.sh N [--gpu M] [--lossy]
#   docker-compose -f docker/docker-compose.yml -f docker/docker-compose.edges.yml up --build
# --lossy gives every CPU client the emulated link of docker-compose.lossy.yml.
set -euo pipefail
cd "$(dirname "$0")"
usage() {
  echo "usage: $0 N [--gpu M] [--lossy]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
n=$1
shift
gpus=0
lossy=0
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) gpus=${2:?}; shift 2 ;;
    --lossy) lossy=1; shift ;;
    *) usage ;;
  esac
done
[[ "$n" =~ ^[0-9]+$ && "$gpus" =~ ^[0-9]+$ ]] || usage
total=$((n + gpus))
[ "$n" -ge 3 ] || { echo "gen-edges: N must be >= 3 (docker-compose.yml defines edge-1..3)" >&2; exit 2; }

ids=()
for i in $(seq 1 "$n"); do ids+=("edge-$i"); done
for i in $(seq 1 "$gpus"); do ids+=("edge-gpu-$i"); done

SERVER_SANS=${SERVER_SANS:-DNS:coordinator,DNS:aggregator} ../scripts/gen-certs.sh certs "${ids[@]}"
# The containers run as uid 10001: as root, hand their keys to it (never the CA's key,
# which stays with whoever signs identities); otherwise say which chown to run.
keys=(certs/server.key)
for id in "${ids[@]}"; do keys+=("certs/$id.key"); done
if [ "$(id -u)" -eq 0 ]; then
  chown 10001:10001 "${keys[@]}"
  chmod 0400 "${keys[@]}"
else
  echo "gen-edges: not root: run 'sudo chown 10001:10001 ${keys[*]/#/docker/}' (in the" \
    "repository root) so the containers (uid 10001) can read their keys" >&2
fi

{
  echo "# Written by docker/gen-edges.sh $n --gpu $gpus$([ $lossy = 1 ] && echo ' --lossy'). Do not edit."
  echo "services:"
  shard=0
  for id in "${ids[@]}"; do
    gpu=0
    [[ "$id" == edge-gpu-* ]] && gpu=1
    echo "  $id:"
    if [ $gpu = 1 ]; then
      echo "    image: fedlgc/edge-cuda:0.1.0"
      echo "    build: {context: .., dockerfile: docker/Dockerfile.cuda}"
    else
      echo "    image: fedlgc/edge:\${FEDLGC_TAG:-0.1.0}"
      echo "    build: {context: .., dockerfile: docker/Dockerfile, target: edge}"
    fi
    echo "    depends_on: [coordinator]"
    echo "    volumes:"
    echo "      - $id-state:/var/lib/fedlgc"
    echo "      - ./certs/ca.pem:/certs/ca.pem:ro"
    echo "      - ./certs/$id.pem:/certs/client.pem:ro"
    echo "      - ./certs/$id.key:/certs/client.key:ro"
    [ $gpu = 1 ] &&
      echo "      - \${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}:/data/fashion-mnist:ro"
    if [ $gpu = 0 ] && [ $lossy = 1 ]; then
      echo "    environment:"
      echo "      LINK_RATE: \"\${LINK_RATE-10mbit}\""
      echo "      LINK_LOSS: \"\${LINK_LOSS:-2}\""
    fi
    echo "    networks: [fedlgc]"
    echo "    command: [\"--server=coordinator:50051\", \"--tls-server-name=coordinator\", \"--id=$id\","
    echo "              \"--tls-cert=/certs/client.pem\", \"--tls-key=/certs/client.key\","
    echo "              \"--shard=$shard\", \"--num-shards=$total\", \"--linger=15\"]"
    if [ $gpu = 0 ] && [ $lossy = 1 ]; then
      echo "    entrypoint: [\"/usr/local/bin/fedlgc-lossy-link\", \"/usr/local/bin/fedlgc-edge\","
      echo "                 \"--metrics-listen=0.0.0.0:9464\", \"--state-dir=/var/lib/fedlgc\","
      echo "                 \"--tls-ca=/certs/ca.pem\"]"
    fi
    echo "    restart: on-failure"
    if [ $gpu = 0 ] && [ $lossy = 1 ]; then
      echo "    user: root"
      echo "    cap_add: [NET_ADMIN]"
    fi
    if [ $gpu = 1 ]; then
      echo "    deploy:"
      echo "      resources:"
      echo "        reservations:"
      echo "          devices: [{driver: nvidia, count: 1, capabilities: [gpu]}]"
    fi
    shard=$((shard + 1))
  done
  echo
  echo "volumes:"
  for id in "${ids[@]}"; do echo "  $id-state: {}"; done
} >docker-compose.edges.yml

targets=$(printf '"%s:9464", ' "${ids[@]}")
printf '[{"targets": [%s], "labels": {"role": "edge"}}]\n' "${targets%, }" >prometheus/targets/edges.json
# FEDLGC_GPU_SHARD: the shard of docker-compose.gpu.yml's client (gen-edges.sh 3 --gpu 1).
printf 'FEDLGC_CLIENTS=%s\nFEDLGC_GPU_SHARD=%s\n' "$total" "$n" >.env
echo "gen-edges: $n CPU + $gpus GPU clients: docker/docker-compose.edges.yml," \
  "docker/prometheus/targets/edges.json, docker/.env, certificates in docker/certs"
