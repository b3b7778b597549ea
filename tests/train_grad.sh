#!/usr/bin/env bash
# train_grad.sh — LoRA training gradients against PyTorch autograd: tests/train_grad.py builds
# tiny random Hugging Face decoders (llama, qwen2, qwen3, gemma3) with a PEFT adapter and writes
# float64 autograd gradients of the masked (completion-only) cross-entropy; test_train with
# HX_TRAIN_REF compares helix's f32 gradients per matrix (relative error < 1e-4) and the loss.
#
# Needs python with torch, transformers and peft, which CI does not install (PyPI's torch pulls
# several GB of CUDA libraries), so it runs only when HX_HF_PYTHON names such an interpreter;
# otherwise it skips (exit 77) saying why.
set -u
cd "$(dirname "$0")/.."
SHARED="${HX_SHARED:-../shared}"
PY="${HX_HF_PYTHON:-}"
[ -n "$PY" ] || { echo "SKIP: HX_HF_PYTHON is not set (a python with torch, transformers and peft)"; exit 77; }
"$PY" -c "import torch, transformers, peft" 2>/dev/null ||
  { echo "SKIP: $PY cannot import torch, transformers and peft (pip install peft)"; exit 77; }
[ -f "$SHARED/tokenizers/qwen3.tokenizer.json" ] || { echo "SKIP: $SHARED/tokenizers not found (set HX_SHARED)"; exit 77; }
TT="${HX_TEST_TRAIN:-}"
if [ -z "$TT" ] && [ -n "${HX_BIN:-}" ]; then TT="$(dirname "$HX_BIN")/tests/test_train"; fi
[ -n "$TT" ] && [ -x "$TT" ] || { echo "SKIP: test_train binary not found (set HX_BIN or HX_TEST_TRAIN)"; exit 77; }
out="$(mktemp -d /tmp/hx_train_grad.XXXXXX)"
trap 'rm -rf "$out"' EXIT
"$PY" tests/train_grad.py "$out" "$SHARED" 2>&1 | grep -v -e "Writing model shards" -e "Loading weights" \
  -e "Warning" -e "warnings.warn" || true
for n in llama qwen2 qwen3 gemma3; do
  [ -f "$out/$n.grads.f32" ] || { echo "FAIL: train_grad.py made no $n reference"; exit 1; }
done
HX_TRAIN_REF="$out" "$TT"
