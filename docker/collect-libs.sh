#!/usr/bin/env bash
# Copies the shared libraries BINARY links (as ldd resolves them) into OUT_DIR, except
# the C library and the NVIDIA driver, which the runtime image and host provide.
#   docker/collect-libs.sh BINARY OUT_DIR
set -euo pipefail
bin=$1
out=$2
mkdir -p "$out"
ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libcuda.so* | libnvidia*) ;;
    *) cp -L "$lib" "$out/" ;;
  esac
done
echo "collect-libs: $(ls "$out" | wc -l) libraries in $out"
