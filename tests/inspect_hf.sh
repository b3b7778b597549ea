#!/usr/bin/env bash
# inspect_hf.sh — helix-bg inspect's attention probabilities against
# transformers' output_attentions (eager, float64) on tiny random llama / qwen2 /
# qwen3 / gemma3 folders (tests/inspect_hf.py; folders by tests/hf_make_tiny.py,
# with real tokenizers from ../shared/tokenizers). Max abs difference < 1e-5.
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

VENV="${HX_HF_VENV:-$HOME/.cache/helix/hf-venv}"
PY="${HX_HF_PYTHON:-}"
if [ -z "$PY" ] && [ -x "$VENV/bin/python" ]; then PY="$VENV/bin/python"; fi
if [ -z "$PY" ] && [ "${HX_HF_INSTALL:-0}" = 1 ]; then
  command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
  python3 -m venv "$VENV" || { echo "SKIP: python3 -m venv $VENV failed (python3-venv missing?)"; exit 77; }
  echo "inspect_hf: pip install torch transformers safetensors numpy into $VENV (PyPI; several GB)"
  "$VENV/bin/pip" install -q torch transformers safetensors numpy ||
    { echo "SKIP: pip install into $VENV failed (no network?)"; exit 77; }
  PY="$VENV/bin/python"
fi
[ -n "$PY" ] || { echo "SKIP: no python with torch + transformers (set HX_HF_PYTHON, or HX_HF_INSTALL=1 to pip-install them into $VENV)"; exit 77; }
"$PY" -c "import torch, transformers, numpy" 2>/dev/null ||
  { echo "SKIP: $PY cannot import torch, transformers and numpy"; exit 77; }

out="$(mktemp -d /tmp/hx_inspect_hf.XXXXXX)"
trap 'rm -rf "$out"' EXIT
"$PY" tests/inspect_hf.py "$out" "$SHARED" "$BIN"
