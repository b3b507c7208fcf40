#!/usr/bin/env bash
# Makes the certificates of an mTLS federation with openssl:
#   OUT/ca.pem, ca.key                       the federation's CA (kept if present)
#   OUT/server.pem, server.key               coordinator (P-256 key); SAN localhost, 127.0.0.1 and
#                                            the names in $SERVER_SANS (e.g. DNS:coordinator)
#   OUT/<client>.pem, <client>.key           one per client (P-256); CN = the client id
#
#   scripts/gen-certs.sh OUT client-0 client-1 ...
# Existing files are kept, so adding a client later signs just its certificate.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [CLIENT_ID ...]" >&2
  exit 2
fi
out=$1
shift
mkdir -p "$out"
umask 077
days=3650

if [ ! -f "$out/ca.pem" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$out/ca.key" -out "$out/ca.pem" \
    -days $days -subj "/CN=fedlgc CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
fi

# sign NAME CN EXTFILE
sign() {
  local name=$1 cn=$2 ext=$3
  [ -f "$out/$name.pem" ] && return 0
  # P-256 keys: a coordinator signs one handshake per connecting client, ~10x cheaper
  # than with RSA-2048 (thousands of clients reconnect at once after a restart).
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$out/$name.key" \
    -out "$out/$name.csr" \
    -subj "/CN=$cn" 2>/dev/null
  openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
    -CAcreateserial -out "$out/$name.pem" -days $days -extfile "$ext" 2>/dev/null
  rm -f "$out/$name.csr"
}

ext=$(mktemp)
trap 'rm -f "$ext"' EXIT
sans="DNS:localhost,IP:127.0.0.1${SERVER_SANS:+,$SERVER_SANS}"
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' \
  "$sans" >"$ext"
sign server coordinator "$ext"

printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n' >"$ext"
for client in "$@"; do
  if ! [[ "$client" =~ ^[A-Za-z0-9._-]{1,64}$ ]]; then
    echo "client id '$client' must be 1-64 characters of [A-Za-z0-9._-]" >&2
    exit 2
  fi
  sign "$client" "$client" "$ext"
done
chmod 644 "$out"/*.pem
echo "certificates in $out: ca, server${*:+, }$*"
