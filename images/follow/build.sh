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

host_pip

# The host's docker CLI and Compose v2 plugin, copied into the image: static, or linked only
# against glibc (which the Debian base has: Debian's docker.io CLI is such a binary).
docker_cli="$(command -v docker)"
compose_plugin=""
for dir in "${DOCKER_CONFIG:-${HOME:-/root}/.docker}/cli-plugins" /usr/local/lib/docker/cli-plugins \
  /usr/local/libexec/docker/cli-plugins /usr/lib/docker/cli-plugins /usr/libexec/docker/cli-plugins; do
  if [[ -x "${dir}/docker-compose" ]]; then compose_plugin="${dir}/docker-compose"; break; fi
done
[[ -n "${compose_plugin}" ]] || { echo "build.sh: the Compose v2 plugin is missing (make docker installs it)" >&2; exit 1; }
glibc='^(linux-vdso\.so\.1|libc\.so\.6|libpthread\.so\.0|libdl\.so\.2|libm\.so\.6|libresolv\.so\.2|/lib64/ld-linux-x86-64\.so\.2|/lib/ld-linux-aarch64\.so\.1)$'
for binary in "${docker_cli}" "${compose_plugin}"; do
  others="$( (ldd "${binary}" 2>/dev/null || true) | awk '{print $1}' | grep -Ev "${glibc}" | grep -v '^not$' || true)"
  if [[ -n "${others}" ]]; then
    echo "build.sh: ${binary} needs libraries beyond glibc (${others//$'\n'/ }); the image needs a static build of it" >&2
    exit 1
  fi
done

ensure_base
base_id="$(docker image inspect -f '{{.Id}}' "${base}")"

fetch_wheels "${repo}/build/follow-wheels" "${here}"

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

exit_when_current "${ctx}"

echo "build.sh: building ${tag} from ${base} (network disabled)"
docker build --quiet --network=none \
  --build-arg "BASE_IMAGE=${base}" \
  --label "${label}=${inputs}" \
  --label "vllm-composer.follow.base=${base_id}" \
  --tag "${tag}" \
  "${ctx}" >/dev/null
# the copied CLI and plugin run in the image (a library missing there fails the build here)
docker run --rm --network=none --entrypoint docker "${tag}" compose version >/dev/null
echo "build.sh: built ${tag} (inputs ${inputs:0:12})"
