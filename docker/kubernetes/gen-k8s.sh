#!/usr/bin/env bash
# Writes the fedlgc tree as Kubernetes manifests: a root coordinator, A aggregators and N
# edge clients (N a multiple of A; edge i trains shard i-1 of N under aggregator
# (i-1) mod A).
#   fedlgc.yaml   the root (StatefulSet "coordinator", 1 replica, a volume for its state
#                 dir) and the aggregators (StatefulSet "aggregator", A replicas: pods
#                 aggregator-0.., each a volume of its own, identity agg-<pod index>), with
#                 their Services (the aggregators' headless, so each pod has a DNS name)
#   edges.yaml    one Deployment per edge client (1 replica, Recreate: an identity never
#                 runs twice) with a PersistentVolumeClaim for its state
#   secrets.yaml  the certificates as Secrets: fedlgc-server (the CA and the coordinators'
#                 server certificate, SANs coordinator and aggregator), fedlgc-aggregators
#                 (the aggregators' client certificates at the root), fedlgc-edge-<i> (each
#                 edge's own). Keys inside: keep this file out of version control.
# Certificates are made in CERTS (default docker/certs) when missing (scripts/gen-certs.sh).
#
#   docker/kubernetes/gen-k8s.sh [-n EDGES] [-a AGGREGATORS] [-o OUT] [-c CERTS] [-t TAG]
#   kubectl apply -f OUT/secrets.yaml -f OUT/fedlgc.yaml -f OUT/edges.yaml
# Defaults: 4 edges, 2 aggregators, OUT = docker/kubernetes (fedlgc.yaml and edges.yaml
# there are this script's output for the defaults), images fedlgc/coordinator and
# fedlgc/edge at tag 0.1.0. Job settings: FEDLGC_ROUNDS (20), FEDLGC_CODEC and FEDLGC_DOWNLINK_CODEC
# (zstd(qsgd(bits=4,norm=linf))), FEDLGC_MODEL (cnn), FEDLGC_ROUND_TIMEOUT (300).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
edges=4
aggs=2
out=$here
certs=$here/../certs
tag=0.1.0
while getopts "n:a:o:c:t:" opt; do
  case $opt in
    n) edges=$OPTARG ;;
    a) aggs=$OPTARG ;;
    o) out=$OPTARG ;;
    c) certs=$OPTARG ;;
    t) tag=$OPTARG ;;
    *) exit 2 ;;
  esac
done
[[ "$edges" =~ ^[1-9][0-9]*$ && "$aggs" =~ ^[1-9][0-9]*$ ]] || {
  echo "gen-k8s: -n and -a must be positive integers" >&2
  exit 2
}
if [ $((edges % aggs)) -ne 0 ]; then
  echo "gen-k8s: $edges edges do not split evenly over $aggs aggregators" >&2
  exit 2
fi
per=$((edges / aggs))
rounds=${FEDLGC_ROUNDS:-20}
codec=${FEDLGC_CODEC:-zstd(qsgd(bits=4,norm=linf))}
downlink=${FEDLGC_DOWNLINK_CODEC:-zstd(qsgd(bits=4,norm=linf))}
model=${FEDLGC_MODEL:-cnn}
timeout=${FEDLGC_ROUND_TIMEOUT:-300}
mkdir -p "$out"

ids=()
for i in $(seq 0 $((aggs - 1))); do ids+=("agg-$i"); done
for i in $(seq 1 "$edges"); do ids+=("edge-$i"); done
SERVER_SANS=${SERVER_SANS:-DNS:coordinator,DNS:aggregator} \
  "$here/../../scripts/gen-certs.sh" "$certs" "${ids[@]}" >/dev/null

header() {  # what every generated file starts with
  echo "# Written by docker/kubernetes/gen-k8s.sh -n $edges -a $aggs: edit the script, not this file."
}

# A container's hardening and the probes of its metrics port.
container_common() {
  cat <<EOF
          securityContext:
            allowPrivilegeEscalation: false
            capabilities:
              drop: [ALL]
          readinessProbe:
            httpGet: {path: /metrics, port: metrics}
            periodSeconds: 10
          livenessProbe:
            httpGet: {path: /metrics, port: metrics}
            periodSeconds: 15
            failureThreshold: 6
EOF
}

pod_security() {
  cat <<EOF
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        runAsGroup: 10001
        fsGroup: 10001
EOF
}

state_claim() {  # a StatefulSet's volume for the state dir
  cat <<EOF
  volumeClaimTemplates:
    - metadata:
        name: state
      spec:
        accessModes: [ReadWriteOnce]
        resources:
          requests:
            storage: 1Gi
EOF
}

# A tier of coordinators: its Service and its StatefulSet of fedlgc/coordinator pods, each
# with a volume for its state dir and the server certificate.
#   coordinators NAME COMPONENT REPLICAS HEADLESS ENV ARGS PORTS MOUNTS VOLUMES
# ENV, ARGS, PORTS, MOUNTS and VOLUMES are YAML lines to add to the container (the last to
# the pod's volumes); HEADLESS is "headless" for a Service that names every pod.
coordinators() {
  local name=$1 component=$2 replicas=$3 headless=$4
  local labels="{app.kubernetes.io/name: fedlgc, app.kubernetes.io/component: $component}"
  cat <<EOF
---
apiVersion: v1
kind: Service
metadata:
  name: $name
  labels: $labels
spec:
EOF
  if [ "$headless" = headless ]; then
    echo "  clusterIP: None  # headless: $name-0.$name, $name-1.$name, ..."
  fi
  cat <<EOF
  selector: $labels
  ports:
    - {name: grpc, port: 50051, targetPort: grpc}
    - {name: metrics, port: 9464, targetPort: metrics}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: $name
  labels: $labels
spec:
  serviceName: $name
  replicas: $replicas
  podManagementPolicy: Parallel
  selector:
    matchLabels: $labels
  template:
    metadata:
      labels: $labels
      annotations: {prometheus.io/scrape: "true", prometheus.io/port: "9464"}
    spec:
$(pod_security)
      containers:
        - name: $name
          image: fedlgc/coordinator:$tag
          # The image's entrypoint listens on 50051, serves metrics on 9464, keeps its
          # state in /var/lib/fedlgc and reads /certs/{ca,server}.pem and server.key.
EOF
  [ -n "$5" ] && echo "$5"
  echo "          args:"
  echo "$6"
  cat <<EOF
          ports:
            - {name: grpc, containerPort: 50051}
            - {name: metrics, containerPort: 9464}
EOF
  [ -n "$7" ] && echo "$7"
  cat <<EOF
$(container_common)
          resources:
            requests: {cpu: 500m, memory: 1Gi}
          volumeMounts:
            - {name: state, mountPath: /var/lib/fedlgc}
            - {name: certs, mountPath: /certs, readOnly: true}
EOF
  [ -n "$8" ] && echo "$8"
  cat <<EOF
      volumes:
        - name: certs
          secret: {secretName: fedlgc-server, defaultMode: 0440}
EOF
  [ -n "$9" ] && echo "$9"
  state_claim
}

args() {  # each argument as a line of a container's args
  for a in "$@"; do echo "            - $a"; done
}

{
  header
  echo "# The root coordinator and the aggregators of the fedlgc tree (docs/deployment.md)."
  coordinators coordinator root 1 "" "" \
    "$(args "--rounds=$rounds" "--min-clients=$aggs" --max-client-weight=1 "--codec=$codec" \
      "--downlink-codec=$downlink" "--model=$model" "--round-timeout=$timeout" --linger=15)" "" "" ""
  # The pod's index (Kubernetes 1.28+): aggregator-N is agg-N at the root. Every aggregator
  # pod mounts every aggregator certificate (a StatefulSet's pods share one template) and
  # uses its own.
  coordinators aggregator aggregator "$aggs" headless \
    "          env:
            - name: AGG_INDEX
              valueFrom:
                fieldRef: {fieldPath: \"metadata.labels['apps.kubernetes.io/pod-index']\"}" \
    "$(args "--min-clients=$per" "--codec=$codec" "--model=$model" "--round-timeout=$timeout" \
      --eval-every=0 --linger=15 --parent=coordinator:50051 --parent-tls-server-name=coordinator \
      '--parent-id=agg-$(AGG_INDEX)' '--parent-tls-cert=/parent/agg-$(AGG_INDEX).pem' \
      '--parent-tls-key=/parent/agg-$(AGG_INDEX).key' --parent-metrics-listen=0.0.0.0:9465)" \
    "            - {name: upstream, containerPort: 9465}" \
    "            - {name: parent, mountPath: /parent, readOnly: true}" \
    "        - name: parent
          secret: {secretName: fedlgc-aggregators, defaultMode: 0440}"
} >"$out/fedlgc.yaml"

{
  header
  echo "# The edge clients: edge i under aggregator (i-1) mod $aggs, shard i-1 of $edges."
  for i in $(seq 1 "$edges"); do
    a=$(((i - 1) % aggs))
    cat <<EOF
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: edge-$i-state
  labels: {app.kubernetes.io/name: fedlgc, app.kubernetes.io/component: edge}
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 256Mi
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: edge-$i
  labels: {app.kubernetes.io/name: fedlgc, app.kubernetes.io/component: edge, fedlgc/client: edge-$i}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector:
    matchLabels: {app.kubernetes.io/name: fedlgc, fedlgc/client: edge-$i}
  template:
    metadata:
      labels: {app.kubernetes.io/name: fedlgc, app.kubernetes.io/component: edge, fedlgc/client: edge-$i}
      annotations: {prometheus.io/scrape: "true", prometheus.io/port: "9464"}
    spec:
$(pod_security)
      containers:
        - name: edge
          image: fedlgc/edge:$tag
          # The image's entrypoint serves metrics on 9464, keeps its state in
          # /var/lib/fedlgc and reads /certs/ca.pem.
          args:
            - --server=aggregator-$a.aggregator:50051
            - --tls-server-name=aggregator
            - --id=edge-$i
            - --tls-cert=/certs/client.pem
            - --tls-key=/certs/client.key
            - --shard=$((i - 1))
            - --num-shards=$edges
            - --linger=15
          ports:
            - {name: metrics, containerPort: 9464}
$(container_common)
          resources:
            requests: {cpu: "1", memory: 1Gi}
          volumeMounts:
            - {name: state, mountPath: /var/lib/fedlgc}
            - {name: certs, mountPath: /certs, readOnly: true}
      volumes:
        - name: state
          persistentVolumeClaim: {claimName: edge-$i-state}
        - name: certs
          secret: {secretName: fedlgc-edge-$i, defaultMode: 0440}
EOF
  done
} >"$out/edges.yaml"

b64() { base64 -w0 <"$1"; }
{
  header
  echo "# Certificates and keys of the tree: do not commit this file."
  cat <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: fedlgc-server
type: Opaque
data:
  ca.pem: $(b64 "$certs/ca.pem")
  server.pem: $(b64 "$certs/server.pem")
  server.key: $(b64 "$certs/server.key")
---
apiVersion: v1
kind: Secret
metadata:
  name: fedlgc-aggregators
type: Opaque
data:
EOF
  for i in $(seq 0 $((aggs - 1))); do
    echo "  agg-$i.pem: $(b64 "$certs/agg-$i.pem")"
    echo "  agg-$i.key: $(b64 "$certs/agg-$i.key")"
  done
  for i in $(seq 1 "$edges"); do
    cat <<EOF
---
apiVersion: v1
kind: Secret
metadata:
  name: fedlgc-edge-$i
type: Opaque
data:
  ca.pem: $(b64 "$certs/ca.pem")
  client.pem: $(b64 "$certs/edge-$i.pem")
  client.key: $(b64 "$certs/edge-$i.key")
EOF
  done
} >"$out/secrets.yaml"
chmod 600 "$out/secrets.yaml"
echo "gen-k8s: $out/fedlgc.yaml, edges.yaml, secrets.yaml ($aggs aggregators, $edges edges)"
