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

if [[ -n "${PIP:-}" ]]; then
  read -r -a pip <<<"${PIP}"
elif [[ -x "${repo}/.venv/bin/pip" ]]; then
  pip=("${repo}/.venv/bin/pip")
else
  pip=(python3 -m pip)
fi

ensure_base
base_id="$(docker image inspect -f '{{.Id}}' "${base}")"

# The base's Python version and machine decide which wheels to fetch (cached per base image).
cache="${repo}/build/gateway-wheels"
mkdir -p "${cache}"
platform_file="${cache}/platform-${base_id#sha256:}"
if [[ ! -s "${platform_file}" ]]; then
  docker run --rm --network=none --entrypoint python3 "${base}" \
    -c 'import platform, sys; print(f"{sys.version_info[0]}{sys.version_info[1]} {platform.machine()}")' \
    >"${platform_file}.tmp"
  mv "${platform_file}.tmp" "${platform_file}"
fi
read -r pyver machine <"${platform_file}"
wheels="${cache}/cp${pyver}-${machine}"
lock_sum="$(cat "${here}/requirements.txt" "${here}/installer.txt" | sha256sum | cut -d' ' -f1)"
if [[ "$(cat "${wheels}/.complete" 2>/dev/null)" != "${lock_sum}" ]]; then
  echo "build.sh: fetching pinned wheels for cp${pyver} ${machine} into ${wheels}"
  rm -rf "${wheels}"
  mkdir -p "${wheels}"
  "${pip[@]}" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "${pyver}" --implementation cp --abi "cp${pyver}" \
    --platform "manylinux_2_28_${machine}" --platform "manylinux_2_17_${machine}" \
    --platform "manylinux2014_${machine}" --platform "manylinux_2_5_${machine}" \
    --platform "manylinux1_${machine}" \
    --dest "${wheels}" -r "${here}/requirements.txt" -r "${here}/installer.txt"
  echo "${lock_sum}" >"${wheels}/.complete"
fi

ctx="$(mktemp -d "${TMPDIR:-/tmp}/vllm-composer-gateway-ctx.XXXXXX")"
cleanup() { rm -rf -- "${ctx}"; }
trap cleanup EXIT
mkdir -p "${ctx}/wheels" "${ctx}/app/composer/gateway"
cp "${here}/Dockerfile" "${here}/requirements.txt" "${here}/installer.txt" "${ctx}/"
cp "${wheels}"/*.whl "${ctx}/wheels/"
cp "${repo}/composer/__init__.py" "${repo}/composer/errors.py" "${ctx}/app/composer/"
cp "${repo}/composer/gateway/"*.py "${ctx}/app/composer/gateway/"

inputs="$(
  cd "${ctx}"
  { find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; echo "base ${base_id}"; } | sha256sum | cut -d' ' -f1
)"
current="$(docker image inspect -f "{{ index .Config.Labels \"${label}\" }}" "${tag}" 2>/dev/null || true)"
if [[ "${force}" -eq 0 && "${current}" == "${inputs}" ]]; then
  echo "build.sh: ${tag} is current (inputs ${inputs:0:12})"
  exit 0
fi

echo "build.sh: building ${tag} from ${base} (network disabled)"
docker build --quiet --network=none \
  --build-arg "BASE_IMAGE=${base}" \
  --label "${label}=${inputs}" \
  --label "vllm-composer.gateway.base=${base_id}" \
  --tag "${tag}" \
  "${ctx}" >/dev/null
user="$(docker run --rm --network=none --entrypoint id "${tag}" -u)"
if [[ "${user}" == "0" ]]; then
  echo "build.sh: ${tag} runs as root" >&2
  exit 1
fi
echo "build.sh: built ${tag} (inputs ${inputs:0:12}, user ${user})"
