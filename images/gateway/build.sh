#!/usr/bin/env bash
# Build the gateway image offline (docker build --network=none) from a local base image.
#
# Usage: images/gateway/build.sh [--tag TAG] [--base IMAGE] [--no-base-build] [--force]
#   --tag TAG        image tag (default $GATEWAY_IMAGE_TAG or vllm-composer-gateway:<toolkit version>)
#   --base IMAGE     base image (default $BASE_IMAGE or vllm-composer-base:bookworm)
#   --no-base-build  never run images/base/build-base.sh; fail if the base is missing
#   --force          build even when the image's inputs label matches
# Wheels (pinned in requirements.txt and installer.txt) are fetched on the host with pip into
# build/gateway-wheels/ (PIP overrides the pip command). The build is skipped when the image's
# label vllm-composer.gateway.inputs already records the same inputs.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "${repo}/composer/__init__.py")"
tag="${GATEWAY_IMAGE_TAG:-vllm-composer-gateway:${version}}"
label="vllm-composer.gateway.inputs"
usage_lines="2,12"
allowed_force=1
# shellcheck source-path=SCRIPTDIR source=../build-lib.sh
source "${here}/../build-lib.sh"
parse_build_args "$@"

host_pip

ensure_base
base_id="$(docker image inspect -f '{{.Id}}' "${base}")"

# The base's Python version and machine decide which wheels to fetch (cached per base image).
fetch_wheels "${repo}/build/gateway-wheels" "${here}"

ctx="$(mktemp -d "${TMPDIR:-/tmp}/vllm-composer-gateway-ctx.XXXXXX")"
cleanup() { rm -rf -- "${ctx}"; }
trap cleanup EXIT
mkdir -p "${ctx}/wheels" "${ctx}/app/composer"
cp "${here}/Dockerfile" "${here}/requirements.txt" "${here}/installer.txt" "${ctx}/"
cp "${wheels}"/*.whl "${ctx}/wheels/"
cp "${repo}/composer/__init__.py" "${repo}/composer/errors.py" "${ctx}/app/composer/"
# the gateway package with its floors (public/, routing/, control/, status/, host/), sources only
(cd "${repo}/composer" && find gateway -name '*.py' -not -path '*/__pycache__/*') | while IFS= read -r f; do
  install -D -m 0644 "${repo}/composer/${f}" "${ctx}/app/composer/${f}"
done

exit_when_current "${ctx}"

echo "build.sh: building ${tag} from ${base} (network disabled)"
docker build --quiet --network=none \
  --build-arg "BASE_IMAGE=${base}" \
  --label "${label}=${inputs}" \
  --label "vllm-composer.gateway.base=${base_id}" \
  --tag "${tag}" \
  "${ctx}" >/dev/null
user="$(non_root_user)"
echo "build.sh: built ${tag} (inputs ${inputs:0:12}, user ${user})"
