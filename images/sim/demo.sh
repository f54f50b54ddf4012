#!/usr/bin/env bash
# The demo on the simulator: up baseline, up mtp, then a failing swap that rolls back,
# with `status` between the steps; the two swaps run under a small live load through the
# gateway, and the clients' count (requests, failed, cut, longest hold) is shown. It ends
# only once `status` says the variant serves, with the real URL and project.
# Usage: images/sim/demo.sh [COMPOSE_SPEC] [ENV_FILE]   (ENV_FILE default: .env.demo; its
# VLLM_PORT and COMPOSE_PROJECT_NAME choose the port and the project). Without a key in
# the environment or the env file, one is generated and written into the env file.
set -euo pipefail
cd "$(dirname "$0")/../.."

compose_spec="${1:-compose-spec}"
env_file="${2:-.env.demo}"
if [[ ! -f "$env_file" ]]; then
  echo "demo: the env file $env_file does not exist (pass ENV_FILE=<a copy of .env.demo>)" >&2
  exit 2
fi
has_key() { [[ -f "$1" ]] && grep -Eq '^[[:space:]]*VLLM_API_KEY=.+' "$1"; }

# Write $2 (text) to $1 atomically, readable only by its owner (it holds the key).
write_private() {
  local tmp
  tmp="$(mktemp "$(dirname "$1")/.$(basename "$1").XXXXXX")"  # mktemp: mode 0600
  if ! { printf '%s' "$2" >"$tmp" && mv -f "$tmp" "$1"; }; then
    rm -f "$tmp"
    return 1
  fi
}

# A key for this demo, unless the environment or the env file has one already: written
# into the env file, so that `status`, `up` and clients find it after the demo. A file git
# tracks (the committed .env.demo) gets a private copy beside it instead, FILE.local
# (ignored by git), made again from FILE on each run with the key it already has.
if [[ -z "${VLLM_API_KEY:-}" ]] && ! has_key "$env_file"; then
  if git ls-files --error-unmatch -- "$env_file" >/dev/null 2>&1; then
    local_file="${env_file}.local"
    key_line="$(grep -Em1 '^[[:space:]]*VLLM_API_KEY=.+' "$local_file" 2>/dev/null || true)"
    [[ -n "$key_line" ]] || key_line="VLLM_API_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
    write_private "$local_file" "$(cat "$env_file")"$'\n'"# Written by the demo: the API key of this stack (keep it private)."$'\n'"${key_line}"$'\n'
    echo "demo: $env_file is tracked by git: its private copy $local_file holds the key (git ignores it)"
    env_file="$local_file"
  else
    key="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
    text="$(cat "$env_file")"
    write_private "$env_file" "${text:+$text$'\n'}# Written by the demo: the API key of this stack (keep it private)."$'\n'"VLLM_API_KEY=${key}"$'\n'
    echo "demo: wrote a new VLLM_API_KEY into $env_file (mode 0600)"
  fi
fi
key_from_environment="${VLLM_API_KEY:+yes}"
if [[ -z "$key_from_environment" ]]; then  # the load clients below read it from the environment
  VLLM_API_KEY="$(sed -n 's/^[[:space:]]*VLLM_API_KEY=//p' "$env_file" | tail -n 1 | tr -d "\"'")"
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
# The last lines: commands that work as printed, from this folder (the key is read from the
# env file by the shell, never printed).
shown_cs="$(printf '%q ' "${cs[@]}")"
if [[ -n "$key_from_environment" ]]; then
  # shellcheck disable=SC2016 # printed for the user's shell to expand
  bearer='$VLLM_API_KEY'
else
  bearer="\$(sed -n 's/^[[:space:]]*VLLM_API_KEY=//p' $(printf '%q' "$env_file") | tail -n 1 | tr -d \"\\\"'\")"
fi
body="{\"model\": \"$served\", \"prompt\": \"Hello\", \"max_tokens\": 16}"
step "done: mtp serves on $url as $served (project $project); the API key is in $env_file"
echo "try it:"
echo "  curl -s $url/v1/completions -H \"Authorization: Bearer $bearer\" -H 'Content-Type: application/json' -d '$body'"
echo "  ${shown_cs}status"
echo "stop it with: ${shown_cs}down"
