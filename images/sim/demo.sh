#!/usr/bin/env bash
# The demo on the simulator: up baseline, up mtp, then a failing swap that rolls back,
# with `status` between the steps; the two swaps run under a small live load through the
# gateway, and the clients' count (requests, failed, cut, longest hold) is shown. Usage: images/sim/demo.sh [COMPOSE_SPEC]
set -euo pipefail
cd "$(dirname "$0")/../.."

compose_spec="${1:-compose-spec}"
if [[ -z "${VLLM_API_KEY:-}" ]]; then
  VLLM_API_KEY="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
fi
export VLLM_API_KEY
cs=("$compose_spec" --env-file .env.demo --stack composer.toml --stack images/sim/demo.toml)

step() { printf '\n==> %s\n' "$*"; }

step "compose-spec up baseline"
"${cs[@]}" up baseline
"${cs[@]}" status

python="$(dirname "$compose_spec")/python"
[[ -x "$python" ]] || python=python3
url="http://127.0.0.1:${VLLM_PORT:-8000}"

step "compose-spec up mtp, under a live load of 4 streaming clients through the gateway"
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

step "done: mtp serves on http://127.0.0.1:8000 as claude-opus-5; stop it with: $compose_spec --env-file .env.demo down"
