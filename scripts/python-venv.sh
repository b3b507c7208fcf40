#!/usr/bin/env bash
# Makes a Python virtual environment that imports fedlgc from this build and sees Debian's
# torch (python3-torch links the same libtorch as the package): your own packages go into
# the environment, torch and numpy stay the system's. No network: nothing is downloaded.
#
#   scripts/python-venv.sh DIR [BUILD_DIR]       (BUILD_DIR: build/ by default)
#   DIR/bin/python -c 'import fedlgc; print(fedlgc.__version__)'
set -euo pipefail
dir=${1:?usage: scripts/python-venv.sh DIR [BUILD_DIR]}
build=$(cd "${2:-$(dirname "$0")/../build}" && pwd)
if [ ! -f "$build/python/fedlgc/__init__.py" ]; then
  echo "python-venv: $build/python/fedlgc is not built (cmake --build $build)" >&2
  exit 1
fi
# Debian's interpreter: the one python3-torch is for. pip is left out (it would come from
# the network); add it with Debian's python3-venv if you want it.
/usr/bin/python3 -m venv --without-pip --system-site-packages "$dir"
site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$build/python" >"$site/fedlgc.pth"
"$dir/bin/python" -c 'import fedlgc, torch; print(f"fedlgc {fedlgc.__version__} with torch {torch.__version__} in '"$dir"'")'
