#!/usr/bin/env bash
# Makes the Debian base images docker/Dockerfile builds on, `debian:12` and `debian:12-slim`,
# with debootstrap from the host's own apt mirror, for engines that cannot pull from a
# registry. Images already present are kept.
#
#   docker/base-images.sh [WORK_DIR]      (WORK_DIR: where the root filesystem is made;
#                                          default a temporary folder, removed at the end)
# Needs root, debootstrap and a running engine (DOCKER_HOST as the docker client uses it).
# The mirror is the first `URIs:` of /etc/apt/sources.list.d/debian.sources (or
# FEDLGC_DEBIAN_MIRROR); the images get the host's apt sources, so containers that
# `apt-get install` use the same mirrors, security updates included.
set -euo pipefail
images=(debian:12 debian:12-slim)
missing=()
for image in "${images[@]}"; do
  # present, or pulled where a registry can be reached
  docker image inspect "$image" >/dev/null 2>&1 || docker pull -q "$image" >/dev/null 2>&1 ||
    missing+=("$image")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "base-images: ${images[*]} present"
  exit 0
fi
for tool in debootstrap tar; do
  command -v "$tool" >/dev/null || { echo "base-images: $tool not installed" >&2; exit 1; }
done
sources=/etc/apt/sources.list.d/debian.sources
mirror=${FEDLGC_DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' "$sources" 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}

work=${1:-}
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
rootfs=$work/bookworm
if [ ! -e "$work/bookworm.complete" ]; then
  rm -rf "$rootfs"
  echo "base-images: debootstrap bookworm from $mirror (about a minute)"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log" >&2
    exit 1
  }
  touch "$work/bookworm.complete"
fi
# The host's sources (security updates too) replace debootstrap's one-line list.
if [ -f "$sources" ]; then
  install -m 0644 "$sources" "$rootfs/etc/apt/sources.list.d/debian.sources"
  rm -f "$rootfs/etc/apt/sources.list"
fi
# As Debian's own images: apt keeps no package caches in layers.
cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'CONF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Install-Recommends "false";
CONF
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb

# The filesystem without the kernel's mounts (debootstrap leaves them empty).
import() {
  tar -C "$rootfs" --numeric-owner --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' \
    "$@" -c . | docker import --change 'CMD ["bash"]' - "$image" >/dev/null
  echo "base-images: $image $(docker image inspect -f '{{.Size}}' "$image" | numfmt --to=iec)"
}
slim_dpkg=$rootfs/etc/dpkg/dpkg.cfg.d/fedlgc-slim
rm -f "$slim_dpkg"  # an interrupted earlier run's: never in debian:12
for image in "${missing[@]}"; do
  case "$image" in
    debian:12) import ;;
    # slim, as Debian's own: no manuals, changelogs or translations, now or from later
    # installs; the copyright files stay
    debian:12-slim)
      printf '%s\n' 'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
        'path-exclude /usr/share/locale/*' 'path-include /usr/share/locale/locale.alias' \
        'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' >"$slim_dpkg"
      import --exclude='./usr/share/man/*' --exclude='./usr/share/info/*' \
        --exclude='./usr/share/locale/*/*' --exclude='./usr/share/doc/*/[!c]*' \
        --exclude='./usr/share/doc/*/changelog*'
      rm -f "$slim_dpkg" ;;
  esac
done
