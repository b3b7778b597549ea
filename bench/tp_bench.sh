#!/usr/bin/env bash
# tp_bench.sh — tensor parallelism on a machine with several GPUs: greedy ids
# of TP=2/4 against one GPU (bench/tp_compare.py), then tg128 / pp512 at
# TP=1/2/4 (helix, and llama.cpp's llama-bench with -sm layer and -sm row on
# the same GPUs when LLAMA_BENCH is set), one line per measurement appended
# to $OUT/tp.jsonl.
#
#   B=build-cuda LLAMA_BENCH=/path/llama-bench bash bench/tp_bench.sh [PRESET:MIX ...]
#
# Defaults: qwen3-0.6b:q4_k_m llama-3.1-8b:q4_k_m. B: the folder holding
# helix-bg. ONLY=helix or ONLY=llama runs one engine. NVLink multicast stays
# off (NCCL_NVLS_ENABLE=0).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
B=${B:-build-cuda}
OUTDIR=${OUT:-/tmp/tp-bench}
mkdir -p "$OUTDIR"
SPECS=("$@")
[ ${#SPECS[@]} -eq 0 ] && SPECS=(qwen3-0.6b:q4_k_m llama-3.1-8b:q4_k_m)
NGPU=$(nvidia-smi -L | wc -l)
TPS=(1)
for t in 2 4 8; do [ "$t" -le "$NGPU" ] && TPS+=("$t"); done
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
DATE=$(date -u +%F)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
PROMPT=$(seq -s, 100 37 700)
for spec in "${SPECS[@]}"; do
  preset=${spec%%:*}; mix=${spec##*:}
  f=/tmp/tp-$preset-$mix.gguf
  [ -f "$f" ] || "$B/helix-bg" synth --preset "$preset" --type "$mix" -o "$f" >/dev/null || exit 1
  if [ "${ONLY:-}" != llama ]; then
  files=()
  for tp in "${TPS[@]}"; do
    o="$OUTDIR/greedy-$preset-$mix-tp$tp.json"
    timeout 300 "$B/helix-bg" generate -m "$f" --device cuda -tp "$tp" --prompt-ids "$PROMPT" -n 128 --temp 0 \
      --json --top2 > "$o" 2>"$OUTDIR/greedy-$preset-$mix-tp$tp.err" || { echo "generate -tp $tp failed"; cat "$OUTDIR/greedy-$preset-$mix-tp$tp.err"; }
    files+=("$o")
  done
  python3 bench/tp_compare.py "${files[@]}"
  for tp in "${TPS[@]}"; do
    timeout 300 "$B/helix-bg" bench -m "$f" --device cuda -tp "$tp" -p 512 -n 128 -r 3 --jsonl \
      | tee -a "$OUTDIR/tp.jsonl"
  done
  fi
  if [ -n "${LLAMA_BENCH:-}" ] && [ "${ONLY:-}" != helix ]; then
    for tp in "${TPS[@]}"; do
      vis=$(seq -s, 0 $((tp - 1)))
      for sm in layer row; do
        [ "$tp" = 1 ] && [ "$sm" = row ] && continue
        r=$(CUDA_VISIBLE_DEVICES=$vis timeout 300 "$LLAMA_BENCH" -m "$f" -ngl 99 -fa 1 -sm "$sm" -p 512 -n 128 -r 3 -o jsonl \
            2>"$OUTDIR/llama-$preset-$mix-tp$tp-$sm.err") || { echo "llama-bench -sm $sm on $tp GPUs failed:"; tail -5 "$OUTDIR/llama-$preset-$mix-tp$tp-$sm.err"; }
        echo "$r" | python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line: continue
    j = json.loads(line)
    test = "pp%d" % j["n_prompt"] if j["n_prompt"] else "tg%d" % j["n_gen"]
    print(json.dumps({"date": sys.argv[1], "commit": sys.argv[2], "device": sys.argv[3], "engine": "llama.cpp",
                      "model": sys.argv[4], "mix": sys.argv[5], "test": test, "tokens_per_s": round(j["avg_ts"], 2),
                      "tp": int(sys.argv[6]), "split_mode": sys.argv[7]}))
' "$DATE" "$COMMIT" "$DEV" "$preset" "$mix" "$tp" "$sm" | tee -a "$OUTDIR/tp.jsonl"
      done
    done
  fi
done
