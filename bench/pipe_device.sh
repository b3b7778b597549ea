#!/usr/bin/env bash
# pipe_device.sh — the layer (pipeline) split on the GPU machine, from the repo
# root, with prebuilt binaries in D (default .devbin: helix-bg and
# test_pipe_cuda; shared libraries, if any, in D/lib):
#   1. test_pipe_cuda: the split against no split on one GPU (both parts on
#      GPU 0) and, with 2+ GPUs, over GPUs 0 and 1 (its last line:
#      "test_pipe_cuda: N checks, 0 failed"; rc 0);
#   2. helix-bg bench, tg128 and pp512, llama-3.1-8b q4_k_m (random weights,
#      helix-bg synth): no split; --layer-split 2 with both parts on GPU 0
#      (HX_SPLIT_ONE_GPU=1: the split's own cost); with 2+ GPUs --layer-split 2
#      over GPUs 0 and 1. A table per run (device column "... x2 (layer
#      split)" for the split), and one JSON line per test in $OUT/pipe.jsonl
#      (the split's carry "layer_split": 2).
# The split runs its parts one after the other and leaves the decode graphs
# out: expect tg below no split (the price of fitting a model one GPU cannot
# hold), pp close to it.
#
#   bash bench/pipe_device.sh [D]
set -uo pipefail
D=${1:-.devbin}
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}"
O=${OUT:-/tmp/pipe-bench}
mkdir -p "$O"
nvidia-smi -L
NGPU=$(nvidia-smi -L | wc -l)
timeout 400 "$D/test_pipe_cuda" > "$O/test_pipe_cuda.log" 2>&1
echo "test_pipe_cuda rc=$?"
tail -20 "$O/test_pipe_cuda.log"
f=/tmp/pipe-llama-3.1-8b-q4_k_m.gguf
[ -f "$f" ] || "$D/helix-bg" synth --preset llama-3.1-8b --type q4_k_m -o "$f" > /dev/null || { echo "synth failed"; exit 1; }
run() { # label, then bench flags: the table, and the JSON lines
  echo "== $1"; shift
  timeout 300 "$D/helix-bg" bench -m "$f" --device cuda -p 512 -n 128 -r 3 "$@"
  timeout 300 "$D/helix-bg" bench -m "$f" --device cuda -p 512 -n 128 -r 3 --jsonl "$@" >> "$O/pipe.jsonl"
}
run "no split"
HX_SPLIT_ONE_GPU=1 run "layer split 2, both parts on GPU 0" --layer-split 2
if [ "$NGPU" -ge 2 ]; then
  run "layer split 2 over GPUs 0 and 1" --layer-split 2
else
  echo "--layer-split 2 over two GPUs not run: one GPU"
fi
cat "$O/pipe.jsonl"
