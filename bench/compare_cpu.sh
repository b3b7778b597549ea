#!/usr/bin/env bash
# Compare helix-bg bench with llama.cpp's llama-bench on the same GGUF files, in
# the same run, on this CPU. Appends one JSON object per measurement to
# bench/results.jsonl and prints a table.
#
#   LLAMA_BENCH=/path/to/llama-bench bash bench/compare_cpu.sh [-p 128] [-n 32] [-r 3] [-t 2] FILE.gguf...
#
# llama.cpp is a peer built outside this repository (never vendored here).
set -euo pipefail
cd "$(dirname "$0")/.."
P=128; N=32; R=3; T=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    -p) P=$2; shift 2;; -n) N=$2; shift 2;; -r) R=$2; shift 2;; -t) T=$2; shift 2;;
    *) break;;
  esac
done
[ $# -gt 0 ] || { echo "usage: $0 [-p N] [-n N] [-r N] [-t N] FILE.gguf..." >&2; exit 2; }
BIN=${HX_BIN:-build/helix-bg}
LB=${LLAMA_BENCH:-}
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
device="cpu: $cpu, $T threads"
out=bench/results.jsonl
printf '%-40s %-10s %-8s %12s %12s\n' model engine test "t/s" "ratio"
for f in "$@"; do
  name=$(basename "$f" .gguf)
  hx=$("$BIN" bench -m "$f" -p "$P" -n "$N" -r "$R" -t "$T" --json)
  declare -A hxv=() lbv=()
  while IFS= read -r line; do
    test=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["test"])' "$line")
    tps=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens_per_s"])' "$line")
    mix=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mix"])' "$line")
    hxv[$test]=$tps
    echo "{\"date\": \"$date\", \"commit\": \"$commit\", \"device\": \"$device\", \"engine\": \"helix\", \"model\": \"$name\", \"mix\": \"$mix\", \"test\": \"$test\", \"tokens_per_s\": $tps}" >> "$out"
  done <<< "$hx"
  if [ -n "$LB" ]; then
    lbj=$("$LB" -m "$f" -p "$P" -n "$N" -r "$R" -t "$T" -o jsonl 2>/dev/null)
    while IFS= read -r line; do
      [ -n "$line" ] || continue
      read -r test tps mix < <(python3 -c '
import json,sys
j=json.loads(sys.argv[1]); p=j.get("n_prompt",0); g=j.get("n_gen",0)
print(("pp%d" % p) if p else ("tg%d" % g), j["avg_ts"], j.get("model_type","?").split()[-1])' "$line")
      lbv[$test]=$tps
      echo "{\"date\": \"$date\", \"commit\": \"$commit\", \"device\": \"$device\", \"engine\": \"llama.cpp\", \"model\": \"$name\", \"mix\": \"$mix\", \"test\": \"$test\", \"tokens_per_s\": $tps}" >> "$out"
    done <<< "$lbj"
  fi
  for test in "pp$P" "tg$N"; do
    h=${hxv[$test]:-nan}; l=${lbv[$test]:-}
    ratio=$([ -n "$l" ] && python3 -c "print('%.2fx' % ($h/$l))" || echo "-")
    printf '%-40s %-10s %-8s %12.1f %12s\n' "$name" helix "$test" "$h" "$ratio"
    [ -n "$l" ] && printf '%-40s %-10s %-8s %12.1f\n' "$name" llama.cpp "$test" "$l"
  done
  unset hxv lbv
done
