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

# host_pip: set the pip array (PIP overrides; else the checkout's .venv; else python3 -m pip).
host_pip() {
  if [[ -n "${PIP:-}" ]]; then
    read -r -a pip <<<"${PIP}"
  elif [[ -x "${repo}/.venv/bin/pip" ]]; then
    pip=("${repo}/.venv/bin/pip")
  else
    pip=(python3 -m pip)
  fi
}

# fetch_wheels CACHE REQ_DIR: the pinned wheels of REQ_DIR's requirements.txt and
# installer.txt for the base's Python and machine, fetched on the host once into
# CACHE/cp<ver>-<machine>; sets `wheels` to that folder. Needs `base`, `base_id`, `pip`.
fetch_wheels() {
  local cache="$1" req_dir="$2" platform_file pyver machine lock_sum
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
  lock_sum="$(cat "${req_dir}/requirements.txt" "${req_dir}/installer.txt" | sha256sum | cut -d' ' -f1)"
  if [[ "$(cat "${wheels}/.complete" 2>/dev/null)" != "${lock_sum}" ]]; then
    echo "build.sh: fetching pinned wheels for cp${pyver} ${machine} into ${wheels}"
    rm -rf "${wheels}"
    mkdir -p "${wheels}"
    "${pip[@]}" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version "${pyver}" --implementation cp --abi "cp${pyver}" \
      --platform "manylinux_2_28_${machine}" --platform "manylinux_2_17_${machine}" \
      --platform "manylinux2014_${machine}" --platform "manylinux_2_5_${machine}" \
      --platform "manylinux1_${machine}" \
      --dest "${wheels}" -r "${req_dir}/requirements.txt" -r "${req_dir}/installer.txt"
    echo "${lock_sum}" >"${wheels}/.complete"
  fi
}

# exit_when_current CTX: set `inputs` to the hash of the build context and the base; exit 0
# when `tag` already carries it in its `label` (unless --force).
exit_when_current() {
  local current
  inputs="$(
    cd "$1" || exit 1
    { find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; echo "base ${base_id}"; } | sha256sum | cut -d' ' -f1
  )"
  current="$(docker image inspect -f "{{ index .Config.Labels \"${label}\" }}" "${tag}" 2>/dev/null || true)"
  if [[ "${force}" -eq 0 && "${current}" == "${inputs}" ]]; then
    echo "build.sh: ${tag} is current (inputs ${inputs:0:12})"
    exit 0
  fi
}

# non_root_user: print the image's user id; fail when it runs as root.
non_root_user() {
  local user
  user="$(docker run --rm --network=none --entrypoint id "${tag}" -u)"
  if [[ "${user}" == "0" ]]; then
    echo "build.sh: ${tag} runs as root" >&2
    exit 1
  fi
  echo "${user}"
}
