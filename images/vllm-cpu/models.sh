#!/usr/bin/env bash
# Generate the tiny checkpoints (make_models.py) inside the vllm-cpu image, with no
# network, into a host directory; idempotent (models already current are left alone).
#
# Usage: images/vllm-cpu/models.sh [--image TAG] [OUTDIR] [-- make_models.py options]
#   --image TAG  the image with torch and transformers (default $VLLM_CPU_IMAGE or vllm-cpu:0.32.0)
#   OUTDIR       host directory (default .composer/models-cpu under the repository)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
image="${VLLM_CPU_IMAGE:-vllm-cpu:0.32.0}"
outdir="${here}/../../.composer/models-cpu"
extra=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --image) image="${2:?--image needs a value}"; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "models.sh: unknown option: $1 (allowed: --image, --help, --)" >&2; exit 2 ;;
    *) outdir="$1" ;;
  esac
  shift
done

if ! docker image inspect "${image}" >/dev/null 2>&1; then
  echo "models.sh: image ${image} is not available: build it with images/vllm-cpu/build.sh" >&2
  exit 1
fi
mkdir -p "${outdir}"
outdir="$(cd "${outdir}" && pwd)"
docker run --rm --network none \
  --user "$(id -u):$(id -g)" \
  --env HOME=/tmp --env HF_HUB_DISABLE_PROGRESS_BARS=1 --env TRANSFORMERS_VERBOSITY=error \
  --volume "${here}/make_models.py:/opt/make_models.py:ro" \
  --volume "${outdir}:/out" \
  --entrypoint python3 \
  "${image}" /opt/make_models.py /out "${extra[@]}"
