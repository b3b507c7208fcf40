#!/usr/bin/env bash
# Entrypoint of an edge container on an emulated wireless link, then drops to the
# unprivileged fedlgc user and runs the command given (the edge client):
#   LINK_RATE   uplink rate cap for tbf (default 10mbit; "" for none)
#   LINK_LOSS   whole percent of outgoing packets dropped at random by nftables (default 2)
#   LINK_DEV    interface (default eth0)
# Needs CAP_NET_ADMIN (compose: cap_add NET_ADMIN) and runs as root until the exec.
# The kernels we target have no netem: no added delay here.
set -euo pipefail
dev=${LINK_DEV:-eth0}
rate=${LINK_RATE-10mbit}
loss=${LINK_LOSS:-2}
if ! [[ "$loss" =~ ^[0-9]+$ ]] || [ "$loss" -gt 100 ]; then
  echo "lossy-link: LINK_LOSS must be a whole percent 0-100, not '$loss'" >&2
  exit 2
fi

if [ -n "$rate" ]; then
  tc qdisc replace dev "$dev" root tbf rate "$rate" burst 32kbit latency 400ms
fi
if [ "$loss" != 0 ]; then
  nft add table inet fedlgc_link
  nft add chain inet fedlgc_link out '{ type filter hook output priority 0 ; policy accept ; }'
  nft add rule inet fedlgc_link out oifname "$dev" numgen random mod 100 '<' "$loss" drop
fi
echo "lossy-link: $dev rate=${rate:-unlimited} loss=${loss}%" >&2
exec setpriv --reuid=fedlgc --regid=fedlgc --init-groups --inh-caps=-all --bounding-set=-all -- "$@"
