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

VENV="${HX_HF_VENV:-$HOME/.cache/helix/hf-venv}"
PY="${HX_HF_PYTHON:-}"
if [ -z "$PY" ] && [ -x "$VENV/bin/python" ]; then PY="$VENV/bin/python"; fi
if [ -z "$PY" ] && [ "${HX_HF_INSTALL:-0}" = 1 ]; then
  command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
  python3 -m venv "$VENV" || { echo "SKIP: python3 -m venv $VENV failed (python3-venv missing?)"; exit 77; }
  echo "hf_decoders: pip install torch transformers safetensors numpy into $VENV (PyPI; several GB)"
  "$VENV/bin/pip" install -q torch transformers safetensors numpy ||
    { echo "SKIP: pip install into $VENV failed (no network?)"; exit 77; }
  PY="$VENV/bin/python"
fi
[ -n "$PY" ] || { echo "SKIP: no python with torch + transformers (set HX_HF_PYTHON, or HX_HF_INSTALL=1 to pip-install them into $VENV)"; exit 77; }
"$PY" -c "import torch, transformers, numpy" 2>/dev/null ||
  { echo "SKIP: $PY cannot import torch, transformers and numpy"; exit 77; }

if [ -n "${HX_HF_KEEP:-}" ]; then out="$HX_HF_KEEP"; mkdir -p "$out"
else out="$(mktemp -d /tmp/hx_hf_tiny.XXXXXX)"; trap 'rm -rf "$out"' EXIT; fi
"$PY" tests/hf_make_tiny.py "$out" "$SHARED" 2>&1 | grep -v -e "Writing model shards" -e "Loading weights" ||
  true
for n in llama qwen2 qwen3 gemma3; do
  [ -f "$out/$n.ref.json" ] || { echo "FAIL: hf_make_tiny.py made no $n reference"; exit 1; }
done
HX_HF_TINY="$out" "$TH"
