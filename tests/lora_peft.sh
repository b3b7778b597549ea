#!/usr/bin/env bash
# lora_peft.sh — LoRA adapters made by PEFT on tiny random Hugging Face decoders
# (embed_tokens adapted on all, lm_head on the untied llama; qwen2, qwen3 and
# gemma3 tie their heads; gemma3 scales its embedding): helix's
# logits with the PEFT folder and with its GGUF conversion against
# transformers+PEFT in float64 (tests/lora_peft.py writes both, test_lora with
# HX_LORA_PEFT compares them, max abs error under 1e-4).
#
# Needs python with torch, transformers and peft, which CI does not install
# (PyPI's torch pulls several GB of CUDA libraries), so it runs only when
# HX_HF_PYTHON names such an interpreter (pip install peft into the
# tests/hf_decoders.sh venv); otherwise it skips (exit 77) saying why.
set -u
cd "$(dirname "$0")/.."
SHARED="${HX_SHARED:-../shared}"
PY="${HX_HF_PYTHON:-}"
[ -n "$PY" ] || { echo "SKIP: HX_HF_PYTHON is not set (a python with torch, transformers and peft)"; exit 77; }
"$PY" -c "import torch, transformers, peft" 2>/dev/null ||
  { echo "SKIP: $PY cannot import torch, transformers and peft (pip install peft)"; exit 77; }
[ -f "$SHARED/tokenizers/qwen3.tokenizer.json" ] || { echo "SKIP: $SHARED/tokenizers not found (set HX_SHARED)"; exit 77; }
TL="${HX_TEST_LORA:-}"
if [ -z "$TL" ] && [ -n "${HX_BIN:-}" ]; then TL="$(dirname "$HX_BIN")/tests/test_lora"; fi
[ -n "$TL" ] && [ -x "$TL" ] || { echo "SKIP: test_lora binary not found (set HX_BIN or HX_TEST_LORA)"; exit 77; }
out="$(mktemp -d /tmp/hx_lora_peft.XXXXXX)"
trap 'rm -rf "$out"' EXIT
"$PY" tests/lora_peft.py "$out" "$SHARED" 2>&1 | grep -v -e "Writing model shards" -e "Loading weights" || true
for n in llama qwen2 qwen3 gemma3; do
  [ -f "$out/$n.lora.f32" ] || { echo "FAIL: lora_peft.py made no $n reference"; exit 1; }
done
HX_LORA_PEFT="$out" "$TL"
