#!/usr/bin/env bash
# Fills docker/prebuilt/ for `docker build --build-arg BINARIES=prebuilt`: the coordinator
# and edge client from BIN_DIR, without debug symbols, and the shared libraries they link
# (docker/collect-libs.sh). Run it on Debian 12, the images' distribution.
#   docker/stage-prebuilt.sh BIN_DIR        (e.g. build/bin of a Release build)
set -euo pipefail
bin=${1:?usage: $0 BIN_DIR}
here=$(cd "$(dirname "$0")" && pwd)
out=$here/prebuilt
find "$out" -mindepth 1 ! -name README.md -delete
mkdir -p "$out/bin"
for b in fedlgc-coordinator fedlgc-edge; do
  objcopy --strip-debug "$bin/$b" "$out/bin/$b"
  "$here/collect-libs.sh" "$out/bin/$b" "$out/lib" >/dev/null
done
echo "stage-prebuilt: $(du -sh "$out/bin" | cut -f1) of binaries, $(ls "$out/lib" | wc -l) libraries ($(du -sh "$out/lib" | cut -f1)) in $out"
