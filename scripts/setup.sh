#!/usr/bin/env bash
# Installs every Debian package fedlgc needs to build, test and benchmark. Idempotent:
# when everything is already installed it changes nothing and skips `apt-get update`.
# Run as root (or with sudo) on Debian 12. The CUDA toolkit is not an apt package here:
# CMake builds the CUDA kernels when it finds nvcc, and skips them otherwise.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache git pkg-config curl ca-certificates
  # the stack (TOOLCHAIN.md section 1)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libtorch-dev libssl-dev openssl zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # real data
  dataset-fashion-mnist
  # network emulation for the lossy-link test
  iproute2 nftables
  # fuzzing (libFuzzer) and sanitizers with clang
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
