#!/usr/bin/env bash
# Build the follower image (`compose-spec follow` in a container) offline (docker build
# --network=none) from a local base image.
#
# Usage: images/follow/build.sh [--tag TAG] [--base IMAGE] [--no-base-build] [--force]
#   --tag TAG        image tag (default $FOLLOW_IMAGE_TAG or vllm-composer-follow:<toolkit version>)
#   --base IMAGE     base image (default $BASE_IMAGE or vllm-composer-base:bookworm)
#   --no-base-build  never run images/base/build-base.sh; fail if the base is missing
#   --force          build even when the image's inputs label matches
# Wheels (pinned in requirements.txt and installer.txt) are fetched on the host with pip into
# build/follow-wheels/ (PIP overrides the pip command). The docker CLI and the Compose v2
# plugin are this host's own (both static binaries). The build is skipped when the image's
# label vllm-composer.follow.inputs already records the same inputs.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "${repo}/composer/__init__.py")"
tag="${FOLLOW_IMAGE_TAG:-vllm-composer-follow:${version}}"
label="vllm-composer.follow.inputs"
usage_lines="2,13"
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

# The host's docker CLI and Compose v2 plugin, copied into the image: both must be static.
docker_cli="$(command -v docker)"
compose_plugin=""
for dir in "${DOCKER_CONFIG:-${HOME:-/root}/.docker}/cli-plugins" /usr/local/lib/docker/cli-plugins \
  /usr/local/libexec/docker/cli-plugins /usr/lib/docker/cli-plugins /usr/libexec/docker/cli-plugins; do
  if [[ -x "${dir}/docker-compose" ]]; then compose_plugin="${dir}/docker-compose"; break; fi
done
[[ -n "${compose_plugin}" ]] || { echo "build.sh: the Compose v2 plugin is missing (make docker installs it)" >&2; exit 1; }
for binary in "${docker_cli}" "${compose_plugin}"; do
  if ldd "${binary}" >/dev/null 2>&1; then
    echo "build.sh: ${binary} is dynamically linked; the image needs a static build of it" >&2
    exit 1
  fi
done

ensure_base
base_id="$(docker image inspect -f '{{.Id}}' "${base}")"

cache="${repo}/build/follow-wheels"
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

ctx="$(mktemp -d "${TMPDIR:-/tmp}/vllm-composer-follow-ctx.XXXXXX")"
cleanup() { rm -rf -- "${ctx}"; }
trap cleanup EXIT
mkdir -p "${ctx}/wheels" "${ctx}/bin" "${ctx}/app"
cp "${here}/Dockerfile" "${here}/requirements.txt" "${here}/installer.txt" "${ctx}/"
cp "${wheels}"/*.whl "${ctx}/wheels/"
cp "${docker_cli}" "${ctx}/bin/docker"
cp "${compose_plugin}" "${ctx}/bin/docker-compose"
(cd "${repo}" && find composer -name '*.py' -o -name 'py.typed' | LC_ALL=C sort | xargs cp --parents -t "${ctx}/app")
mkdir -p "${ctx}/app/composer/templates" "${ctx}/app/composer/schema" "${ctx}/app/composer/starter"
cp "${repo}"/templates/*.j2 "${ctx}/app/composer/templates/"
cp "${repo}"/schema/*.json "${ctx}/app/composer/schema/"
cp "${repo}/composer.toml" "${repo}/.env.example" "${ctx}/app/composer/starter/"
# the distribution's metadata (`compose-spec --version` reads it), as an install would write it
meta="${ctx}/app/vllm_variant_composer-${version}.dist-info"
mkdir -p "${meta}"
printf 'Metadata-Version: 2.1\nName: vllm-variant-composer\nVersion: %s\n' "${version}" >"${meta}/METADATA"

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
  --label "vllm-composer.follow.base=${base_id}" \
  --tag "${tag}" \
  "${ctx}" >/dev/null
echo "build.sh: built ${tag} (inputs ${inputs:0:12})"
