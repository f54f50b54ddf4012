#!/usr/bin/env bash
# Regenerate sim-dflash.diff: the change that teaches the simulator the `dflash` method
# (adds it to vllm/config/speculative_methods.py and adds vllm/v1/spec_decode/dflash.py
# from sim-dflash/). Paths in the diff are relative to the package parent (vllm/...).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
src="${here}/../src"
work="$(mktemp -d)"
trap 'rm -rf -- "${work}"' EXIT

mkdir -p "${work}/a" "${work}/b"
cp -r "${src}/vllm" "${work}/a/"
cp -r "${src}/vllm" "${work}/b/"
find "${work}" -name '__pycache__' -type d -prune -exec rm -rf -- {} +
cp -r "${here}/sim-dflash/vllm/." "${work}/b/vllm/"
methods="${work}/b/vllm/config/speculative_methods.py"
grep -q '^    "extract_hidden_states",$' "${methods}"
sed -i 's/^    "extract_hidden_states",$/&\n    "dflash",/' "${methods}"

cd "${work}"
status=0
git diff --no-index --no-prefix --no-color a/vllm b/vllm > "${work}/out.diff" || status=$?
if [[ "${status}" -ne 1 ]]; then
  echo "make-sim-dflash-diff.sh: git diff failed (status ${status})" >&2
  exit 1
fi
# --no-prefix keeps the a/ and b/ directory names, which are exactly git's prefixes.
# A new file is named b/... on both sides of its `diff --git` line: name it a/... first.
grep -v '^index ' "${work}/out.diff" \
  | sed -E 's#^diff --git b/([^ ]+) b/#diff --git a/\1 b/#' > "${here}/sim-dflash.diff"
echo "wrote ${here}/sim-dflash.diff"
