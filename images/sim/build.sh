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
tag="${SIM_IMAGE_TAG:-vllm-sim:latest}"
usage_lines="2,9"
# shellcheck source-path=SCRIPTDIR source=../build-lib.sh
source "${here}/../build-lib.sh"
parse_build_args "$@"
ensure_base

echo "build.sh: building ${tag} from ${base} (network disabled)"
docker build --network=none \
  --build-arg "BASE_IMAGE=${base}" \
  --tag "${tag}" \
  "${here}"
docker run --rm --entrypoint python3 "${tag}" -c 'import vllm' >/dev/null
echo "build.sh: built ${tag}"
