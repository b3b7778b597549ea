#!/usr/bin/env bash
# cudabatch_device.sh — on the GPU machine, from a folder D holding prebuilt
# binaries (test_cuda_seq, helix-bg, batch_decode_bench, base_bench = the same
# bench built from the baseline commit) and their shared libraries in D/lib:
# the many-sequence test, then aggregate decode tok/s at B = 1, 8, 32, 128 for
# qwen3-0.6b and llama-3.2-1b q4_k_m (random weights), baseline then new.
set -uo pipefail
D=${1:?folder}
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}"
O=${OUT:-/tmp}
nvidia-smi -L
RUN_TEST=${RUN_TEST:-1}
if [ "$RUN_TEST" = 1 ]; then
  timeout 240 "$D/test_cuda_seq" > "$O/test.log" 2>&1; echo "test_cuda_seq rc=$?"; grep -v "^ok" "$O/test.log" | tail -25
fi
for p in qwen3-0.6b llama-3.2-1b; do
  "$D/helix-bg" synth --preset $p --type q4_k_m -o /tmp/$p.gguf > /dev/null || { echo "synth $p failed"; exit 1; }
done
for p in qwen3-0.6b llama-3.2-1b; do
  for b in base new; do
    bin="$D/batch_decode_bench"; [ $b = base ] && bin="$D/base_bench"
    timeout 200 "$bin" /tmp/$p.gguf --batch ${BATCH:-1,8,32,128} --label "$p-q4_k_m-$b" --jsonl 2>&1 | tee -a "$O/bench.log"
  done
done
