#!/usr/bin/env bash
# Build a minimal local Debian base image (python3 only) with debootstrap and
# `docker import`, for machines that cannot pull from a registry.
#
# Usage: images/base/build-base.sh [--force] [TAG]
#   TAG defaults to $BASE_TAG or vllm-composer-base:bookworm.
#   The build is skipped when TAG already exists locally, unless --force is given.
set -euo pipefail

force=0
tag="${BASE_TAG:-vllm-composer-base:bookworm}"
suite="${BASE_SUITE:-bookworm}"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --force) force=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    -*) echo "build-base.sh: unknown option: $1" >&2; exit 2 ;;
    *) tag="$1" ;;
  esac
  shift
done

if [[ "${force}" -eq 0 ]] && docker image inspect "${tag}" >/dev/null 2>&1; then
  echo "build-base.sh: ${tag} already exists (use --force to rebuild)"
  exit 0
fi

command -v debootstrap >/dev/null 2>&1 || {
  echo "build-base.sh: debootstrap not found (apt-get install debootstrap)" >&2
  exit 1
}
if [[ "$(id -u)" -ne 0 ]]; then
  echo "build-base.sh: debootstrap needs root" >&2
  exit 1
fi

rootfs="$(mktemp -d "${TMPDIR:-/tmp}/vllm-composer-base.XXXXXX")"
cleanup() { rm -rf -- "${rootfs}"; }
trap cleanup EXIT

echo "build-base.sh: debootstrap ${suite} into ${rootfs}"
debootstrap --variant=minbase --include=python3 "${suite}" "${rootfs}"

# Keep the root filesystem small: no package caches, lists, docs or man pages.
chroot "${rootfs}" apt-get clean
rm -rf -- "${rootfs}/var/lib/apt/lists/"* \
  "${rootfs}/var/cache/apt/"*.bin \
  "${rootfs}/usr/share/doc/"* \
  "${rootfs}/usr/share/man/"* \
  "${rootfs}/usr/share/info/"* \
  "${rootfs}/usr/share/locale/"* \
  "${rootfs}/var/log/"*.log \
  "${rootfs}/tmp/"*

echo "build-base.sh: importing as ${tag}"
tar -C "${rootfs}" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' \
  - "${tag}"
echo "build-base.sh: built ${tag}"
