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
# --ref64: both prefills against the float64 reference forward (must print the comparison)
"$BIN" gpu-test --quick --ref64 -m "$tmp/smollm-135m-q4_0.gguf" -p 24 -n 8 | tee "$tmp/ref64.txt"
grep -q "against the float64 reference forward: CPU" "$tmp/ref64.txt"
# the block-wide decode attention on the head sizes the warp kernel takes (64/128/256)
# (gpu-test reads the HX_CUDA_* switches itself and passes them to the checks)
HX_CUDA_ATT_BLOCK=1 "$BIN" gpu-test --quick
# many sequences in one context against each alone, seq copy/state/keep, and
# the greedy lookahead against none (hx_cuda_dev_opts.no_ahead): tests/test_cuda_seq
SEQ_BIN=${HX_SEQ_BIN:-$(dirname "$BIN")/tests/test_cuda_seq}
if [ -x "$SEQ_BIN" ]; then "$SEQ_BIN"; else echo "test_cuda_seq not built ($SEQ_BIN): skipped here (ctest runs it)"; fi
# chat on the GPU (the decode step and the sampling chain on the device, only
# the token copied back) against the CPU, two turns: greedy, and top-k 1
# sampling (deterministic, through the GPU chain). Needs ../shared (HX_SHARED).
M="${HX_SHARED:-../shared}/models/stories260K.gguf"
if [ -f "$M" ]; then
  for opts in "--temp 0 --repeat-penalty 1" "--temp 0.8 --top-k 1"; do
    for dev in cpu cuda; do
      printf 'Once upon a time\nThe cat\n' | "$BIN" chat -m "$M" -n 24 $opts --device $dev -t 2 > "$tmp/chat.$dev" 2> "$tmp/chat.$dev.err"
    done
    grep -q ", cuda;" "$tmp/chat.cuda.err" || { echo "FAIL: chat --device cuda did not run on the GPU"; exit 1; }
    cmp -s "$tmp/chat.cpu" "$tmp/chat.cuda" || { echo "FAIL: chat ($opts) differs between GPU and CPU"; diff "$tmp/chat.cpu" "$tmp/chat.cuda"; exit 1; }
    echo "chat ($opts): GPU = CPU"
  done
else
  echo "chat check skipped: $M not found"
fi
