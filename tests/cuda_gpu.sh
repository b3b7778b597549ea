#!/usr/bin/env bash
# GPU backend (issue 4): every kernel against the CPU reference on fresh random
# inputs, and whole models GPU vs CPU (logits, 64 greedy tokens), via
# `helix-bg gpu-test`. Skipped (77) where helix-bg has no CUDA or no GPU is usable,
# as in CI; runs on the device machine (bench/gpu_run.sh).
set -uo pipefail
BIN=${HX_BIN:-build/helix-bg}
"$BIN" gpu-test --probe
rc=$?
[ $rc = 77 ] && { echo "SKIP: no usable GPU in this build/machine"; exit 77; }
[ $rc = 0 ] || exit 1
set -e
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
models=()
for spec in smollm-135m:q4_0 smollm-135m:q8_0 smollm-135m:q4_k_m smollm-135m:f16; do
  f="$tmp/${spec/:/-}.gguf"
  "$BIN" synth --preset "${spec%%:*}" --type "${spec##*:}" -o "$f" >/dev/null
  models+=(-m "$f")
done
"$BIN" gpu-test --quick "${models[@]}" -p 24 -n 64
