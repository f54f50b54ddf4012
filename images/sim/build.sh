#!/usr/bin/env bash
# Build the simulator image offline (docker build --network=none) from a local base image.
#
# Usage: images/sim/build.sh [--tag TAG] [--base IMAGE] [--no-base-build]
#   --tag TAG        image tag (default $SIM_IMAGE_TAG or vllm-sim:latest)
#   --base IMAGE     base image (default $BASE_IMAGE or vllm-composer-base:bookworm)
#   --no-base-build  never run images/base/build-base.sh; fail if the base is missing
# The default base is built first with images/base/build-base.sh when it does not exist.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
default_base="vllm-composer-base:bookworm"
tag="${SIM_IMAGE_TAG:-vllm-sim:latest}"
base="${BASE_IMAGE:-${default_base}}"
build_base=1

while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) tag="${2:?--tag needs a value}"; shift ;;
    --base) base="${2:?--base needs a value}"; shift ;;
    --no-base-build) build_base=0 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

if ! docker image inspect "${base}" >/dev/null 2>&1; then
  if [[ "${build_base}" -eq 1 && "${base}" == "${default_base}" ]]; then
    "${here}/../base/build-base.sh" "${base}"
  else
    echo "build.sh: base image ${base} is not available locally" >&2
    echo "  build it with images/base/build-base.sh, or pull it where a registry is reachable" >&2
    exit 1
  fi
fi

echo "build.sh: building ${tag} from ${base} (network disabled)"
docker build --network=none \
  --build-arg "BASE_IMAGE=${base}" \
  --tag "${tag}" \
  "${here}"
docker run --rm --entrypoint python3 "${tag}" -c 'import vllm' >/dev/null
echo "build.sh: built ${tag}"
