#!/usr/bin/env bash
# Writes docker/stack.yml: the fedlgc tree as a Docker Swarm stack of three services, a root
# coordinator, A aggregators (a replicated service: replica N is agg-N) and N edge clients
# (a replicated service: replica I is edge-I, shard I-1), each replica with its identity and
# certificate from Docker secrets; and makes the certificates in docker/certs when missing.
# N must be a multiple of A: every aggregator waits for N/A edge clients.
#
#   docker/gen-stack.sh [EDGES [AGGREGATORS]]        # defaults: 4 edges, 2 aggregators
#   docker swarm init                                # once, on the manager
#   docker stack deploy -c docker/stack.yml fedlgc
#
# The committed stack.yml is this script's output for the defaults. The images are the
# ones docker-compose builds (fedlgc/coordinator, fedlgc/edge); on a swarm of several nodes
# push them to a registry every node can pull from.
set -euo pipefail
cd "$(dirname "$0")"
edges=${1:-4}
aggs=${2:-2}
[[ "$edges" =~ ^[1-9][0-9]*$ && "$aggs" =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: $0 [EDGES [AGGREGATORS]]" >&2
  exit 2
}
if [ $((edges % aggs)) -ne 0 ]; then
  echo "gen-stack: $edges edges do not split evenly over $aggs aggregators" >&2
  exit 2
fi
ids=()
for i in $(seq 1 "$aggs"); do ids+=("agg-$i"); done
for i in $(seq 1 "$edges"); do ids+=("edge-$i"); done
SERVER_SANS=${SERVER_SANS:-DNS:coordinator,DNS:aggregator} ../scripts/gen-certs.sh certs "${ids[@]}" >/dev/null

secrets() {  # the secrets of `kind` (agg or edge) 1..n, as a service's list
  local kind=$1 n=$2
  for i in $(seq 1 "$n"); do
    echo "      - {source: $kind-$i-cert, target: $kind-$i.pem, uid: \"10001\", mode: 0400}"
    echo "      - {source: $kind-$i-key, target: $kind-$i.key, uid: \"10001\", mode: 0400}"
  done
}

{
  cat <<EOF
# Written by docker/gen-stack.sh $edges $aggs: edit the script, not this file.
# fedlgc on Docker Swarm: a root coordinator, $aggs aggregators and $edges edge clients.
#
#   docker/gen-stack.sh $edges $aggs && docker stack deploy -c docker/stack.yml fedlgc
#
# Aggregator replica N is agg-N at the root (its task slot, {{.Task.Slot}}); edge replica I
# is edge-I and trains shard I-1 of $edges. An edge picks its aggregator from the
# aggregators' task addresses in address order, (I-1) mod $aggs, so that each gets
# $((edges / aggs)), and lists the others after it to fail over to. Swarm cannot give one
# replica a secret the others lack: every replica of a service is given every certificate
# of that service and takes its own by slot, so replicas of one service trust each other
# (one service per identity keeps them apart). State: one volume per service, a folder
# per replica in it.
version: "3.8"

services:
  coordinator:
    image: fedlgc/coordinator:\${FEDLGC_TAG:-0.1.0}
    entrypoint:
      - /usr/local/bin/fedlgc-coordinator
      - --listen=0.0.0.0:50051
      - --metrics-listen=0.0.0.0:9464
      - --state-dir=/var/lib/fedlgc
      - --tls-ca=/run/secrets/ca.pem
      - --tls-cert=/run/secrets/server.pem
      - --tls-key=/run/secrets/server.key
      - --rounds=\${FEDLGC_ROUNDS:-20}
      - --min-clients=$aggs
      - --max-client-weight=1
      - --codec=\${FEDLGC_CODEC:-zstd(qsgd(bits=4,norm=linf))}
      - --downlink-codec=\${FEDLGC_DOWNLINK_CODEC:-zstd(qsgd(bits=4,norm=linf))}
      - --model=\${FEDLGC_MODEL:-cnn}
      - --local-steps=\${FEDLGC_LOCAL_STEPS:-0}
      - --round-timeout=\${FEDLGC_ROUND_TIMEOUT:-300}
      - --linger=15
    secrets:
      - {source: ca, target: ca.pem}
      - {source: server-cert, target: server.pem, uid: "10001", mode: 0400}
      - {source: server-key, target: server.key, uid: "10001", mode: 0400}
    volumes:
      - coordinator-state:/var/lib/fedlgc
    networks: [fedlgc]
    deploy:
      replicas: 1
      # Clients reach it by DNS round robin on its task's address: gRPC keeps long-lived
      # streams, and the virtual IP's IPVS balancing is not available on every host.
      endpoint_mode: dnsrr
      restart_policy:
        condition: on-failure  # a finished job exits 0 and stays down

  aggregator:
    image: fedlgc/coordinator:\${FEDLGC_TAG:-0.1.0}
    hostname: "agg-{{.Task.Slot}}"
    environment:
      FEDLGC_SLOT: "{{.Task.Slot}}"
    entrypoint:
      - /bin/sh
      - -c
      - >-
        exec /usr/local/bin/fedlgc-coordinator --listen=0.0.0.0:50051
        --metrics-listen=0.0.0.0:9464 --state-dir=/var/lib/fedlgc/agg-\$\$FEDLGC_SLOT
        --tls-ca=/run/secrets/ca.pem --tls-cert=/run/secrets/server.pem
        --tls-key=/run/secrets/server.key --min-clients=$((edges / aggs))
        '--codec=\${FEDLGC_CODEC:-zstd(qsgd(bits=4,norm=linf))}' --model=\${FEDLGC_MODEL:-cnn}
        --round-timeout=\${FEDLGC_ROUND_TIMEOUT:-300} --eval-every=0 --linger=15
        --parent=coordinator:50051 --parent-tls-server-name=coordinator
        --parent-id=agg-\$\$FEDLGC_SLOT --parent-tls-cert=/run/secrets/agg-\$\$FEDLGC_SLOT.pem
        --parent-tls-key=/run/secrets/agg-\$\$FEDLGC_SLOT.key
        --parent-metrics-listen=0.0.0.0:9465
    secrets:
      - {source: ca, target: ca.pem}
      - {source: server-cert, target: server.pem, uid: "10001", mode: 0400}
      - {source: server-key, target: server.key, uid: "10001", mode: 0400}
$(secrets agg "$aggs")
    volumes:
      - aggregator-state:/var/lib/fedlgc
    networks: [fedlgc]
    deploy:
      replicas: $aggs
      endpoint_mode: dnsrr
      restart_policy:
        condition: on-failure

  edge:
    image: fedlgc/edge:\${FEDLGC_TAG:-0.1.0}
    hostname: "edge-{{.Task.Slot}}"
    environment:
      FEDLGC_SLOT: "{{.Task.Slot}}"
    entrypoint:
      - /bin/sh
      - -c
      - >-
        until addrs=\$\$(getent ahostsv4 tasks.aggregator | awk '{print \$\$1}' | sort -u -t. -n
        -k1,1 -k2,2 -k3,3 -k4,4) && [ \$\$(echo "\$\$addrs" | grep -c .) -ge $aggs ]; do sleep 1;
        done;
        mine=\$\$(( (FEDLGC_SLOT - 1) % $aggs ));
        servers=\$\$(echo "\$\$addrs" | awk -v m=\$\$mine '{a[NR-1]=\$\$1":50051"} END {for (i = 0;
        i < NR; i++) printf "%s%s", (i ? "," : ""), a[(m + i) % NR]}');
        echo "edge-\$\$FEDLGC_SLOT: aggregators \$\$servers";
        exec /usr/local/bin/fedlgc-edge --metrics-listen=0.0.0.0:9464
        --state-dir=/var/lib/fedlgc/edge-\$\$FEDLGC_SLOT --tls-ca=/run/secrets/ca.pem
        --server=\$\$servers --tls-server-name=aggregator --id=edge-\$\$FEDLGC_SLOT
        --tls-cert=/run/secrets/edge-\$\$FEDLGC_SLOT.pem
        --tls-key=/run/secrets/edge-\$\$FEDLGC_SLOT.key --shard=\$\$((FEDLGC_SLOT - 1))
        --num-shards=$edges --linger=15
    healthcheck:
      # /metrics comes up once it has found the aggregators: give it the time to.
      start_period: 120s
    secrets:
      - {source: ca, target: ca.pem}
$(secrets edge "$edges")
    volumes:
      - edge-state:/var/lib/fedlgc
    networks: [fedlgc]
    deploy:
      replicas: $edges
      restart_policy:
        condition: on-failure

networks:
  fedlgc:
    driver: overlay

volumes:
  coordinator-state:
  aggregator-state:
  edge-state:

secrets:
  ca:
    file: ./certs/ca.pem
  server-cert:
    file: ./certs/server.pem
  server-key:
    file: ./certs/server.key
EOF
  for kind in agg edge; do
    n=$([ $kind = agg ] && echo "$aggs" || echo "$edges")
    for i in $(seq 1 "$n"); do
      printf '  %s-%d-cert:\n    file: ./certs/%s-%d.pem\n' "$kind" "$i" "$kind" "$i"
      printf '  %s-%d-key:\n    file: ./certs/%s-%d.key\n' "$kind" "$i" "$kind" "$i"
    done
  done
} >stack.yml
echo "gen-stack: docker/stack.yml ($aggs aggregators, $edges edges), certificates in docker/certs"
