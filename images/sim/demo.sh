#!/usr/bin/env bash
# The demo on the simulator: up baseline, up mtp, then a failing swap that rolls back,
# with `status` between the steps; the two swaps run under a small live load through the
# gateway, and the clients' count (requests, failed, cut, longest hold) is shown. It ends
# only once `status` says the variant serves, with the real URL and project.
# Usage: images/sim/demo.sh [COMPOSE_SPEC] [ENV_FILE]   (ENV_FILE default: .env.demo; its
# VLLM_PORT and COMPOSE_PROJECT_NAME choose the port and the project)
set -euo pipefail
cd "$(dirname "$0")/../.."

compose_spec="${1:-compose-spec}"
env_file="${2:-.env.demo}"
if [[ ! -f "$env_file" ]]; then
  echo "demo: the env file $env_file does not exist (pass ENV_FILE=<a copy of .env.demo>)" >&2
  exit 2
fi
# A key for this demo, unless the environment or the env file has one already.
if [[ -z "${VLLM_API_KEY:-}" ]] && ! grep -Eq '^[[:space:]]*VLLM_API_KEY=.+' "$env_file"; then
  VLLM_API_KEY="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
  export VLLM_API_KEY
fi
cs=("$compose_spec" --env-file "$env_file" --stack composer.toml --stack images/sim/demo.toml)

python="$(dirname "$compose_spec")/python"
[[ -x "$python" ]] || python=python3

step() { printf '\n==> %s\n' "$*"; }

# One field of `status --json` (empty when absent or null).
status_field() {
  "${cs[@]}" status --json | "$python" -c \
    'import json, sys; v = json.load(sys.stdin).get(sys.argv[1]); print("" if v is None else v)' "$1"
}

step "compose-spec up baseline"
"${cs[@]}" up baseline
"${cs[@]}" status

project="$(status_field project)"
url="$(status_field url)"
served="$(status_field served_model_name)"
if [[ -z "$url" ]]; then
  echo "demo: status shows no serving variant after up baseline" >&2
  exit 1
fi
export SERVED_MODEL_NAME="$served"

step "compose-spec up mtp, under a live load of 4 streaming clients through the gateway ($url)"
"$python" images/sim/demo_load.py "$url" 4 &
load_pid=$!
sleep 2
"${cs[@]}" up mtp
sleep 2
kill -INT "$load_pid"
wait "$load_pid"
"${cs[@]}" status

step "compose-spec up dflash2-wsl-no-pin (fails on purpose: emulated WSL2 without pinned memory), under load"
"$python" images/sim/demo_load.py "$url" 4 &
load_pid=$!
sleep 2
if "${cs[@]}" up dflash2-wsl-no-pin; then
  echo "unexpected: the failing variant started" >&2
  exit 1
fi
sleep 2
kill -INT "$load_pid"
wait "$load_pid"
"${cs[@]}" status

# Done only when status says mtp serves and answers.
variant="$(status_field variant)"
health="$(status_field health)"
if [[ "$variant" != "mtp" || "$health" != "ready" ]]; then
  echo "demo: expected mtp to serve after the rollback; status says variant=${variant:-none} health=${health:-none}" >&2
  exit 1
fi
step "done: mtp serves on $url as $served (project $project); stop it with: $compose_spec --env-file $env_file down"
