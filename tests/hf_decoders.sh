#!/usr/bin/env bash
# hf_decoders.sh — Hugging Face decoder folders against transformers: builds tiny
# random llama / qwen2 / qwen3 / gemma3 folders with real tokenizers from
# ../shared/tokenizers (tests/hf_make_tiny.py, float64 references), then runs
# test_hf with HX_HF_TINY pointing at them (logits, greedy ids, tokenizer).
#
# Needs python with torch + transformers. PyPI's torch wheel pulls the CUDA
# libraries (about 5.6 GB installed, 6 minutes here), too much for CI, so:
#   HX_HF_PYTHON=/path/to/python   use that interpreter (must import torch, transformers)
#   HX_HF_INSTALL=1                create a venv (HX_HF_VENV, default ~/.cache/helix/hf-venv)
#                                  and pip install torch transformers safetensors numpy there
# otherwise an existing venv at HX_HF_VENV is used, else the test skips (exit 77)
# saying why. HX_HF_KEEP=DIR keeps the generated folders in DIR.
set -u
cd "$(dirname "$0")/.."
SHARED="${HX_SHARED:-../shared}"
[ -f "$SHARED/tokenizers/qwen3.tokenizer.json" ] || { echo "SKIP: $SHARED/tokenizers not found (set HX_SHARED)"; exit 77; }
TH="${HX_TEST_HF:-}"
if [ -z "$TH" ] && [ -n "${HX_BIN:-}" ]; then TH="$(dirname "$HX_BIN")/tests/test_hf"; fi
[ -n "$TH" ] && [ -x "$TH" ] || { echo "SKIP: test_hf binary not found (set HX_BIN or HX_TEST_HF)"; exit 77; }

. tests/hf_python.bash
hf_python hf_decoders

if [ -n "${HX_HF_KEEP:-}" ]; then out="$HX_HF_KEEP"; mkdir -p "$out"
else out="$(mktemp -d /tmp/hx_hf_tiny.XXXXXX)"; trap 'rm -rf "$out"' EXIT; fi
"$PY" tests/hf_make_tiny.py "$out" "$SHARED" 2>&1 | grep -v -e "Writing model shards" -e "Loading weights" ||
  true
for n in llama qwen2 qwen3 gemma3; do
  [ -f "$out/$n.ref.json" ] || { echo "FAIL: hf_make_tiny.py made no $n reference"; exit 1; }
done
HX_HF_TINY="$out" "$TH"
