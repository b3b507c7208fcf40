#!/usr/bin/env bash
# Installs the Debian packages fedlgc needs. Idempotent: when everything is already
# installed it changes nothing and skips `apt-get update`. Run as root (or with sudo) on
# Debian 12. The CUDA toolkit is not an apt package here: CMake builds the CUDA kernels
# when it finds nvcc, and skips them otherwise.
#
#   scripts/setup.sh            everything: build, tests, benchmarks, deployment checks
#   scripts/setup.sh build      what building the binaries needs (docker build stage)
#   scripts/setup.sh build-nolibtorch   the same without Debian's libtorch (CUDA image,
#                               which brings a CUDA build of libtorch instead)
#   scripts/setup.sh runtime    shared libraries and data the binaries need to run
set -euo pipefail

profile=${1:-all}

toolchain=(build-essential cmake ninja-build ccache git pkg-config curl ca-certificates)
# the stack, without libtorch
stack=(libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libssl-dev openssl zlib1g-dev libzstd-dev
  # flags and config files (CLI11), JSON round logs (nlohmann)
  libcli11-dev nlohmann-json3-dev
  # the data readers: .npz archives (libzip), PNG and JPEG image folders (libpng,
  # libjpeg-turbo)
  libzip-dev libpng-dev libturbojpeg0-dev)
# the Python edge client and codecs (import fedlgc): a pybind11 module over the C++ client,
# next to Debian's torch, which links the same libtorch as libtorch-dev
python=(python3-dev pybind11-dev python3-torch python3-numpy)
tests=(libgtest-dev libgmock-dev libbenchmark-dev python3 python3-pytest
  # the benchmarks' plots (bench/time_to_accuracy.sh) and fedlgc-report's pages, which
  # the tests render in headless Chromium
  python3-matplotlib chromium
  # network emulation for the lossy-link test
  iproute2 nftables
  # fuzzing (libFuzzer) and sanitizers with clang
  clang libclang-rt-14-dev)
# static checks of docker/, the Prometheus integration test, and the compose deployment on
# a real engine (a dockerd of the test's own; base images made with debootstrap)
# (npm comes from apt unless a node installation already provides it)
deployment=(docker-compose prometheus yamllint debootstrap)
# Debian's engine only where there is none (it would replace Docker CE's packages)
command -v dockerd >/dev/null || deployment+=(docker.io)
data=(dataset-fashion-mnist)
runtime=(libgrpc++1.51 libprotobuf32 libabsl20220623 libprometheus-cpp-pull1.0
  libprometheus-cpp-core1.0 libtorch1.13 libssl3 zlib1g libzstd1 libzip4 libpng16-16 libturbojpeg0 curl
  ca-certificates)

case "$profile" in
  all) packages=("${toolchain[@]}" "${stack[@]}" libtorch-dev "${python[@]}" "${tests[@]}"
    "${deployment[@]}" "${data[@]}") ;;
  build) packages=("${toolchain[@]}" "${stack[@]}" libtorch-dev) ;;
  build-nolibtorch) packages=("${toolchain[@]}" "${stack[@]}") ;;
  runtime) packages=("${runtime[@]}" "${data[@]}") ;;
  *)
    echo "usage: $0 [all|build|build-nolibtorch|runtime]" >&2
    exit 2
    ;;
esac

# npm linters for Dockerfiles and compose files, pinned.
npm_tools=(dockerfilelint@1.8.0 dclint@3.1.0)
# The Kubernetes API's schemas for validating docker/kubernetes (an ES module, which node
# resolves from a folder of its own rather than the global one): tests/deployment/k8s_check.py
k8s_models=kubernetes-models@5.1.0
k8s_prefix=${FEDLGC_NODE_PREFIX:-/usr/local/lib/fedlgc-node}

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "$profile" = all ] && ! command -v npm >/dev/null; then missing+=(npm); fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages of profile '$profile' already installed"
else
  echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if [ "$profile" = all ]; then
  for t in "${npm_tools[@]}"; do
    if ! npm ls -g --depth=0 "$t" >/dev/null 2>&1; then
      echo "setup: npm install -g $t"
      $SUDO npm install -g --no-audit --no-fund --loglevel=error "$t" >/dev/null
    fi
  done
  if ! npm ls --prefix "$k8s_prefix" --depth=0 "$k8s_models" >/dev/null 2>&1; then
    echo "setup: npm install --prefix $k8s_prefix $k8s_models"
    $SUDO mkdir -p "$k8s_prefix"
    $SUDO npm install --prefix "$k8s_prefix" --no-audit --no-fund --loglevel=error \
      "$k8s_models" >/dev/null
  fi
fi
echo "setup: done"
