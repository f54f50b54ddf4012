#!/usr/bin/env bash
# Record what real vLLM (the vllm-cpu image) prints and answers, for comparison with the
# simulator: CLI help of the flags the project renders, endpoints, SSE chunking, metric
# names, boot log lines and failure lines. Writes small text files beside this script;
# the API key (random, per run) is replaced by <redacted> everywhere.
#
# Usage: images/vllm-cpu/captures/capture.sh [--image TAG] [--port PORT] [CASE...]
#   CASES: help ngram draft failures hd16 bf16 sleep mtp (default: all)
# Needs the image and the checkpoints (make image-vllm-cpu; mtp needs
# images/vllm-cpu/models.sh -- --mtp). Each boot takes a minute or more on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "${here}/../../.." && pwd)"
image="${VLLM_CPU_IMAGE:-vllm-cpu:0.32.0}"
port=18220
models="${repo}/.composer/models-cpu"
cases=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --image) image="${2:?}"; shift ;;
    --port) port="${2:?}"; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    help|ngram|draft|failures|hd16|bf16|sleep|mtp) cases+=("$1") ;;
    *) echo "capture.sh: unknown argument: $1 (cases: help ngram draft failures hd16 bf16 sleep mtp)" >&2; exit 2 ;;
  esac
  shift
done
[[ ${#cases[@]} -gt 0 ]] || cases=(help ngram draft failures hd16 bf16 sleep mtp)

key="sk-$(python3 -c 'import secrets; print(secrets.token_hex(24))')"
name="hcpu-capture"
base="http://127.0.0.1:${port}"
common=(--served-model-name tiny --max-model-len 2048 --kv-cache-memory-bytes 256M --enforce-eager --dtype float32)

redact() { sed -e "s/${key}/<redacted>/g"; }
cleanup() { docker rm -f "${name}" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# start MODEL_DIR_NAME [docker options...] -- [vllm args...]: run detached, wait for
# /health 200 or the container's exit; prints the seconds it took and the outcome.
start() {
  local model="$1"; shift
  local dopts=()
  while [[ "$1" != "--" ]]; do dopts+=("$1"); shift; done
  shift
  cleanup
  local t0; t0="$(date +%s.%N)"
  local positional=("/models/${model}")
  [[ "${model}" != "-" ]] || positional=()   # "-": no model before the options
  docker run -d --name "${name}" --label vllm-composer.capture=1 --shm-size 1g \
    -p "127.0.0.1:${port}:8000" -v "${models}:/models:ro" -e "VLLM_API_KEY=${key}" \
    "${dopts[@]}" "${image}" "${positional[@]}" "$@" >/dev/null
  for _ in $(seq 1 1200); do
    sleep 0.25
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' "${base}/health" || true)" == 200 ]]; then
      printf 'ready after %.1f s\n' "$(echo "$(date +%s.%N) - ${t0}" | bc)"
      return 0
    fi
    if [[ "$(docker inspect -f '{{.State.Running}}' "${name}")" != true ]]; then
      printf 'exited with %s after %.1f s\n' "$(docker inspect -f '{{.State.ExitCode}}' "${name}")" \
        "$(echo "$(date +%s.%N) - ${t0}" | bc)"
      return 1
    fi
  done
  echo "not ready after 300 s"
  return 1
}

logs() { docker logs "${name}" 2>&1 | redact; }
# The log without traceback frames: the lines a person (or a hint table) reads.
log_lines() { logs | grep -v -E '^\s|^Traceback|\] +(File|\^|[a-z_]+ = )|\]\s+\^' || true; }
# The end of the log with its error details (indented pydantic lines kept), frames dropped.
log_tail() { logs | grep -v -E '^\s+File "|^\s+\^+\s*$|\] +File "|\]\s+\^+\s*$' | tail -n "$1" || true; }
http() { curl -s -i "$@" | tr -d '\r' | redact; }
auth=(-H "Authorization: Bearer ${key}" -H "Content-Type: application/json")

case_help() {
  docker run --rm --entrypoint vllm "${image}" --version 2>/dev/null > "${here}/version.txt"
  : > "${here}/serve-help.txt"
  for flag in served-model-name api-key port host tensor-parallel-size max-model-len \
      gpu-memory-utilization kv-cache-memory-bytes attention-backend speculative-config \
      enable-sleep-mode enforce-eager dtype; do
    docker run --rm --entrypoint vllm "${image}" serve "--help=${flag}" 2>/dev/null \
      | sed -n '1,/^When passing JSON CLI arguments/p' | sed '$d' >> "${here}/serve-help.txt"
  done
}

# completion BODY_JSON: POST /v1/completions, prints the body.
completion() { curl -s "${auth[@]}" "${base}/v1/completions" -d "$1"; }

stream_capture() {
  local out="$1" body="$2"
  curl -s -N "${auth[@]}" "${base}/v1/chat/completions" -d "${body}" | tr -d '\r' > "${out}.raw"
  {
    echo "# request: ${body}"
    echo "# $(grep -c '^data: ' "${out}.raw") data lines; first 3 and last 3 raw lines (blank lines kept):"
    head -n 6 "${out}.raw"
    echo "..."
    tail -n 6 "${out}.raw"
  } > "${out}"
  rm -f "${out}.raw"
}

# decode_rate PROMPT: one streamed 512-token completion, read as it arrives: tokens per
# second from the first to the last text chunk, and how many chunks carried them.
decode_rate() {
  KEY="${key}" URL="${base}" PROMPT="$1" python3 -c '
import json, os, time, urllib.request
body = {"model": "tiny", "prompt": os.environ["PROMPT"], "max_tokens": 512, "temperature": 0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
request = urllib.request.Request(
    os.environ["URL"] + "/v1/completions", data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer " + os.environ["KEY"], "Content-Type": "application/json"})
first = last = None
chunks = tokens = 0
with urllib.request.urlopen(request, timeout=300) as response:
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: {"):
            continue
        chunk = json.loads(line[6:])
        if chunk.get("choices") and chunk["choices"][0].get("text"):
            now = time.monotonic()
            first = first or now
            last = now
            chunks += 1
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
print(f"{tokens} tokens in {chunks} text chunks, {(tokens - 1) / (last - first):.0f} tok/s decode (first to last chunk)")'
}

spec_metrics() { curl -s "${base}/metrics" | grep -E '^vllm:(spec_decode_num_(drafts|draft_tokens|accepted_tokens)_total|generation_tokens_total)' || true; }

case_ngram() {
  local out="${here}/ngram.txt"
  { echo "## boot: ngram K=3"; start qwen3-tiny -- "${common[@]}" --speculative-config '{"method":"ngram","num_speculative_tokens":3}'; } > "${out}"
  {
    echo "## GET /health"; http "${base}/health"; echo
    echo "## GET /version"; http "${base}/version"; echo
    echo "## GET /v1/models"; http "${auth[@]}" "${base}/v1/models"; echo
    echo "## GET /v1/models with a wrong key"; http -H "Authorization: Bearer wrong" "${base}/v1/models"; echo
    echo "## GET /v1/models without a key"; http "${base}/v1/models"; echo
    echo "## POST /v1/completions (temperature 0, 64 tokens)"
    completion '{"model":"tiny","prompt":"hello world the model","max_tokens":64,"temperature":0,"ignore_eos":true}'; echo
    echo "## POST /v1/completions with an unknown model"
    completion '{"model":"nope","prompt":"hi","max_tokens":4}'; echo
    echo "## POST /v1/completions above max_model_len"
    completion '{"model":"tiny","prompt":"hi","max_tokens":4096}'; echo
    echo "## spec-decode counters after the completion"; spec_metrics
    echo "## decode speed"; decode_rate "the quick brown fox"; decode_rate "one two three four"
    echo "## spec-decode counters after the decode runs"; spec_metrics
    echo "## POST /sleep?level=1 without VLLM_SERVER_DEV_MODE"; http -X POST "${base}/sleep?level=1"; echo
    echo "## GET /is_sleeping without VLLM_SERVER_DEV_MODE"; http "${base}/is_sleeping"; echo
  } >> "${out}" 2>&1
  stream_capture "${here}/sse-chat.txt" '{"model":"tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":8,"temperature":0,"stream":true}'
  stream_capture "${here}/sse-chat-usage.txt" '{"model":"tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":8,"temperature":0,"stream":true,"stream_options":{"include_usage":true},"chat_template_kwargs":{"enable_thinking":false}}'
  curl -s "${base}/metrics" > "${here}/metrics-ngram.txt"
  log_lines > "${here}/boot-ngram.log"
  cleanup
}

case_draft() {
  local out="${here}/draft.txt"
  { echo "## boot: draft_model K=3"; start qwen3-tiny -- "${common[@]}" --speculative-config '{"method":"draft_model","model":"/models/qwen3-tiny-draft","num_speculative_tokens":3}'; } > "${out}"
  {
    completion '{"model":"tiny","prompt":"hello world the model","max_tokens":128,"temperature":0,"ignore_eos":true}' >/dev/null
    echo "## spec-decode counters after a 128-token completion"; spec_metrics
    echo "## decode speed"; decode_rate "the quick brown fox"; decode_rate "one two three four"
  } >> "${out}" 2>&1
  log_lines > "${here}/boot-draft.log"
  cleanup
}

case_baseline_speed() {
  local out="${here}/baseline.txt"
  { echo "## boot: baseline"; start qwen3-tiny -- "${common[@]}"; echo "## decode speed"; decode_rate "the quick brown fox"; decode_rate "one two three four"; } > "${out}" 2>&1
  log_lines > "${here}/boot-baseline.log"
  cleanup
}

# fail NAME MODEL [docker options...] -- [vllm args...]: a boot expected to fail; keeps the log lines.
fail() {
  local label="$1"; shift
  { echo "## ${label}"; start "$@" || true; } >> "${here}/failures.txt"
  log_tail 40 > "${here}/fail-${label}.log"
  cleanup
}

case_failures() {
  : > "${here}/failures.txt"
  fail unknown-flag qwen3-tiny -- "${common[@]}" --foo
  fail unknown-method qwen3-tiny -- "${common[@]}" --speculative-config '{"method":"foo","num_speculative_tokens":3}'
  fail spec-tensor-parallel qwen3-tiny -- "${common[@]}" --speculative-config '{"method":"draft_model","model":"/models/qwen3-tiny-draft","num_speculative_tokens":3,"tensor_parallel_size":1}'
  fail max-model-len qwen3-tiny -- --served-model-name tiny --max-model-len 8192 --kv-cache-memory-bytes 256M --enforce-eager --dtype float32
  fail model-not-first-positional - -- --served-model-name tiny /models/qwen3-tiny
  fail small-shm qwen3-tiny --shm-size 64m -- "${common[@]}"
  fail no-kv-budget qwen3-tiny -- --served-model-name tiny --max-model-len 2048 --enforce-eager --dtype float32 --gpu-memory-utilization 0.99
}

# A model that boots and passes /health, then dies on its first request.
first_request_death() {
  local label="$1"; shift
  local out="${here}/${label}.txt"
  { echo "## boot"; start "$@"; } > "${out}" 2>&1 || true
  {
    echo "## GET /health before the first request"; http "${base}/health"; echo
    echo "## first completion"; completion '{"model":"tiny","prompt":"hello","max_tokens":8}'; echo
    sleep 2
    echo "## GET /health after"; http "${base}/health" || echo "(no answer)"; echo
    echo "## container running: $(docker inspect -f '{{.State.Running}} exit={{.State.ExitCode}}' "${name}")"
  } >> "${out}" 2>&1
  log_tail 60 > "${here}/fail-${label}.log"
  cleanup
}

case_hd16() { first_request_death head-dim-16 qwen3-tiny-hd16 -- "${common[@]}"; }
case_bf16() {
  first_request_death bf16-amx qwen3-tiny -- --served-model-name tiny --max-model-len 2048 \
    --kv-cache-memory-bytes 256M --enforce-eager
}

case_sleep() {
  local out="${here}/sleep.txt"
  # vLLM 0.32's CPU platform refuses sleep mode at startup; record that, then what the
  # sleep routes answer with VLLM_SERVER_DEV_MODE=1 on a server without sleep mode.
  { echo "## boot: --enable-sleep-mode, VLLM_SERVER_DEV_MODE=1"
    start qwen3-tiny -e VLLM_SERVER_DEV_MODE=1 -- "${common[@]}" --enable-sleep-mode; } > "${out}" 2>&1 || true
  log_tail 12 > "${here}/fail-sleep-mode.log"
  cleanup
  { echo "## boot: ngram without --enable-sleep-mode, VLLM_SERVER_DEV_MODE=1"
    start qwen3-tiny -e VLLM_SERVER_DEV_MODE=1 -- "${common[@]}" \
      --speculative-config '{"method":"ngram","num_speculative_tokens":3}'
    echo "## sleep metrics"; curl -s "${base}/metrics" | grep -E '^vllm:(engine_sleep_state|sleep_mode)' || echo "(none)"
    echo "## POST /sleep?level=1"; http -X POST "${base}/sleep?level=1"; echo
    echo "## GET /is_sleeping"; http "${base}/is_sleeping"; echo
    echo "## POST /wake_up"; http -X POST "${base}/wake_up"; echo
    echo "## completion after the sleep attempt"
    completion '{"model":"tiny","prompt":"hello world","max_tokens":16,"temperature":0,"ignore_eos":true}'; echo
  } >> "${out}" 2>&1 || true
  log_lines | grep -i -E 'sleep|wake|error' | tail -n 20 > "${here}/boot-sleep.log" || true
  cleanup
}

# mtp_boot MODEL TITLE: boot MODEL with method mtp K=1, one completion and the counters.
mtp_boot() {
  local model="$1" title="$2"
  { echo "## boot: ${title}, method mtp K=1"
    start "${model}" -- "${common[@]}" --speculative-config '{"method":"mtp","num_speculative_tokens":1}'; } >> "${out}" 2>&1 || true
  {
    echo "## completion"; completion '{"model":"tiny","prompt":"hello world the model","max_tokens":64,"temperature":0,"ignore_eos":true}'; echo
    echo "## spec-decode counters"; spec_metrics
  } >> "${out}" 2>&1 || true
  { echo "## ${model}"
    logs | grep -E 'registry.py:[0-9]+\] (ModuleNotFoundError|Error in inspecting)|ValidationError|Value error|Resolved architecture|Starting vLLM|spec|[Mm]odel [Rr]unner|Loading drafter|MTP' || true
  } >> "${here}/boot-mtp.log"
  cleanup
}

case_mtp() {
  out="${here}/mtp.txt"
  for model in mimo-tiny-mtp qwen3_5-tiny-mtp; do
    if [[ ! -d "${models}/${model}" ]]; then
      echo "capture.sh: no ${models}/${model}: run images/vllm-cpu/models.sh -- --mtp" >&2
      return 1
    fi
  done
  : > "${out}"; : > "${here}/boot-mtp.log"
  mtp_boot mimo-tiny-mtp "MiMo (Qwen2 layers) with 1 MTP layer"
  mtp_boot qwen3_5-tiny-mtp "Qwen3.5 (full attention) with 1 MTP layer"
}

for c in "${cases[@]}"; do
  echo "capture.sh: ${c}"
  case "${c}" in
    ngram) case_baseline_speed; case_ngram ;;
    *) "case_${c}" ;;
  esac
done
