#!/usr/bin/env bash
# Build the Prometheus image of the observability profile offline (docker build --network=none).
#
# Usage: images/prometheus/build.sh [--tag TAG] [--base IMAGE] [--no-base-build] [--force]
#   --tag TAG        image tag (default $PROMETHEUS_IMAGE_TAG or vllm-composer-prometheus:<toolkit version>)
#   --base IMAGE     base image (default $BASE_IMAGE or vllm-composer-base:bookworm)
#   --no-base-build  never run images/base/build-base.sh; fail if the base is missing
#   --force          build even when the image's inputs label matches
# Debian's `prometheus` package is fetched on the host with `apt-get download` into
# build/prometheus-deb/ (PROMETHEUS_DEB names a .deb to use instead); its static binaries
# (prometheus, promtool) are extracted with dpkg-deb and copied onto the base. The build is
# skipped when the image's label vllm-composer.prometheus.inputs records the same inputs.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "${repo}/composer/__init__.py")"
tag="${PROMETHEUS_IMAGE_TAG:-vllm-composer-prometheus:${version}}"
label="vllm-composer.prometheus.inputs"
usage_lines="2,12"
allowed_force=1
# shellcheck source-path=SCRIPTDIR source=../build-lib.sh
source "${here}/../build-lib.sh"
parse_build_args "$@"

ensure_base
base_id="$(docker image inspect -f '{{.Id}}' "${base}")"

cache="${repo}/build/prometheus-deb"
mkdir -p "${cache}"
if [[ -n "${PROMETHEUS_DEB:-}" ]]; then
  deb="${PROMETHEUS_DEB}"
else
  arch="$(dpkg --print-architecture)"
  candidate="$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: //p')"
  if [[ -z "${candidate}" || "${candidate}" == "(none)" ]]; then
    echo "build.sh: apt knows no prometheus package (run apt-get update, or set PROMETHEUS_DEB=FILE.deb)" >&2
    exit 1
  fi
  deb="${cache}/prometheus_${candidate//:/%3a}_${arch}.deb"
  if [[ ! -s "${deb}" ]]; then
    echo "build.sh: downloading Debian's prometheus ${candidate} into ${cache}"
    (cd "${cache}" && apt-get download -q "prometheus=${candidate}" >/dev/null)
  fi
fi
if [[ ! -s "${deb}" ]]; then
  echo "build.sh: no package at ${deb}" >&2
  exit 1
fi
deb_version="$(dpkg-deb --field "${deb}" Version)"

ctx="$(mktemp -d "${TMPDIR:-/tmp}/vllm-composer-prometheus-ctx.XXXXXX")"
cleanup() { rm -rf -- "${ctx}"; }
trap cleanup EXIT
dpkg-deb --extract "${deb}" "${ctx}/root"
mkdir -p "${ctx}/bin"
cp "${ctx}/root/usr/bin/prometheus" "${ctx}/root/usr/bin/promtool" "${ctx}/bin/"
rm -rf -- "${ctx}/root"
cp "${here}/Dockerfile" "${ctx}/"

exit_when_current "${ctx}"

echo "build.sh: building ${tag} from ${base} with prometheus ${deb_version} (network disabled)"
docker build --quiet --network=none \
  --build-arg "BASE_IMAGE=${base}" \
  --build-arg "PROMETHEUS_DEB_VERSION=${deb_version}" \
  --label "${label}=${inputs}" \
  --label "vllm-composer.prometheus.base=${base_id}" \
  --tag "${tag}" \
  "${ctx}" >/dev/null
user="$(non_root_user)"
echo "build.sh: built ${tag} (inputs ${inputs:0:12}, prometheus ${deb_version}, user ${user})"
