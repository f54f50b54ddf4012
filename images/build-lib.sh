# shellcheck shell=bash disable=SC2034,SC2154
# Shared by the image build scripts (sourced, not run): their common options and the
# local base image check. The sourcing script sets `tag`, `usage_lines` (the sed range
# of its own header that --help prints) and, before calling parse_build_args, may set
# `allowed_force=1` to accept --force.
#
# Options: --tag TAG, --base IMAGE, --no-base-build, --force (where allowed), --help.

default_base="vllm-composer-base:bookworm"
base="${BASE_IMAGE:-${default_base}}"
build_base=1
force=0
allowed_force="${allowed_force:-0}"

# parse_build_args "$@": set tag, base, build_base and force from the command line.
parse_build_args() {
  local allowed="--tag, --base, --no-base-build"
  [[ "${allowed_force}" -eq 1 ]] && allowed="${allowed}, --force"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --tag) tag="${2:?--tag needs a value}"; shift ;;
      --base) base="${2:?--base needs a value}"; shift ;;
      --no-base-build) build_base=0 ;;
      --force)
        if [[ "${allowed_force}" -ne 1 ]]; then
          echo "build.sh: unknown argument: $1 (allowed: ${allowed})" >&2; exit 2
        fi
        force=1 ;;
      -h|--help) sed -n "${usage_lines}p" "$0"; exit 0 ;;
      *) echo "build.sh: unknown argument: $1 (allowed: ${allowed})" >&2; exit 2 ;;
    esac
    shift
  done
}

# ensure_base: build the default base when it is missing (unless --no-base-build);
# any other missing base is an error.
ensure_base() {
  local lib_dir
  lib_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  docker image inspect "${base}" >/dev/null 2>&1 && return 0
  if [[ "${build_base}" -eq 1 && "${base}" == "${default_base}" ]]; then
    "${lib_dir}/base/build-base.sh" "${base}"
  else
    echo "build.sh: base image ${base} is not available locally" >&2
    echo "  build it with images/base/build-base.sh" >&2
    exit 1
  fi
}
