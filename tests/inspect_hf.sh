#!/usr/bin/env bash
# inspect_hf.sh — helix-bg inspect's attention probabilities against
# transformers' output_attentions (eager, float64) on tiny random llama / qwen2 /
# qwen3 / gemma3 folders (tests/inspect_hf.py; folders by tests/hf_make_tiny.py,
# with real tokenizers from ../shared/tokenizers). Max abs difference < 1e-5.
# Where peft is installed, also through a random PEFT LoRA adapter (inspect
# --lora FOLDER against PeftModel's output_attentions, float64).
#
# Python with torch + transformers, found as tests/hf_decoders.sh finds it:
#   HX_HF_PYTHON=/path/to/python, or a venv at HX_HF_VENV (default
#   ~/.cache/helix/hf-venv); HX_HF_INSTALL=1 creates it (pip: several GB).
# Otherwise the test skips (exit 77) saying why.
set -u
cd "$(dirname "$0")/.."
SHARED="${HX_SHARED:-../shared}"
[ -f "$SHARED/tokenizers/qwen3.tokenizer.json" ] || { echo "SKIP: $SHARED/tokenizers not found (set HX_SHARED)"; exit 77; }
BIN="${HX_BIN:-build/helix-bg}"
[ -x "$BIN" ] || { echo "SKIP: helix-bg not found at $BIN (set HX_BIN)"; exit 77; }

. tests/hf_python.bash
hf_python inspect_hf

out="$(mktemp -d /tmp/hx_inspect_hf.XXXXXX)"
trap 'rm -rf "$out"' EXIT
"$PY" tests/inspect_hf.py "$out" "$SHARED" "$BIN"
