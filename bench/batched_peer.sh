#!/usr/bin/env bash
# batched_peer.sh — batched decode of B sequences, helix (`helix-bg bench
# --batch`) and llama.cpp (llama-batched-bench) on the same GPU in one run:
# 128 prompt + 128 generated tokens per sequence, flash attention on, random
# weights from `helix-bg synth`. One JSONL line per engine, model and B
# appended to $OUT/batched.jsonl (tokens_per_s: aggregate decode tok/s).
#
#   HX=path/helix-bg LLAMA_BATCHED=path/llama-batched-bench bash bench/batched_peer.sh \
#       [PRESET:MIX:B1,B2,..] ...
#
# Defaults: qwen3-0.6b:q4_k_m:1,8,32,128 llama-3.2-1b:q4_k_m:1,8,32,128.
# Without LLAMA_BATCHED only helix runs.
set -uo pipefail
HX=${HX:-build-cuda/helix-bg}
OUTDIR=${OUT:-/tmp/batched-peer}
mkdir -p "$OUTDIR"
SPECS=("$@")
[ ${#SPECS[@]} -eq 0 ] && SPECS=(qwen3-0.6b:q4_k_m:1,8,32,128 llama-3.2-1b:q4_k_m:1,8,32,128)
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
DATE=$(date -u +%F)
COMMIT=${HX_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
for spec in "${SPECS[@]}"; do
  IFS=: read -r preset mix bs <<< "$spec"
  f=/tmp/bp-$preset-$mix.gguf
  [ -f "$f" ] || "$HX" synth --preset "$preset" --type "$mix" -o "$f" > /dev/null || exit 1
  timeout 300 "$HX" bench -m "$f" --device cuda --batch "$bs" -r 3 --jsonl | grep '"tg' | tee -a "$OUTDIR/batched.jsonl"
  if [ -n "${LLAMA_BATCHED:-}" ]; then
    maxb=$(echo "$bs" | tr , '\n' | sort -n | tail -1)
    timeout 300 "$LLAMA_BATCHED" -m "$f" -c $(( maxb * 256 + 256 )) -b 2048 -ub 512 -npp 128 -ntg 128 -npl "$bs" \
        -ngl 99 -fa on 2> "$OUTDIR/llama-$preset-$mix.err" | python3 -c '
import json, sys
for line in sys.stdin:
    f = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(f) < 8 or not f[0].isdigit(): continue
    b, s_tg = int(f[2]), float(f[7])
    print(json.dumps({"date": sys.argv[1], "commit": sys.argv[2], "device": sys.argv[3], "engine": "llama.cpp",
                      "model": sys.argv[4], "mix": sys.argv[5], "test": "tg128-b%d" % b, "tokens_per_s": s_tg,
                      "batch": b}))
' "$DATE" "$COMMIT" "$DEV" "$preset" "$mix" | tee -a "$OUTDIR/batched.jsonl"
  fi
done
