#!/usr/bin/env bash
# Compare helix-bg bench with llama.cpp's llama-bench on the same GGUF files, on
# this CPU (or with --cuda on the GPU), each llama-bench run right after the
# helix run on the same file. Prints a markdown table (model, mix, test, helix
# tok/s, llama.cpp tok/s, ratio) and appends one JSON object per measurement to
# bench/results.jsonl (HX_RESULTS; HX_COMMIT names the commit where git cannot).
#
#   LLAMA_BENCH=/path/to/llama-bench bash bench/compare.sh [--cuda] [-p 512] [-n 128] [-r 3] [-t 2] [SPEC...]
#
# SPEC is PRESET:MIX or PRESET:MIX:P:N (its own prompt / generation lengths);
# default: smollm-135m and qwen3-0.6b, each in q8_0, q4_0 and q4_k_m; with
# --cuda the six rows of issue 4 (helix --device cuda; llama-bench -ngl 99 -fa 1,
# flash attention and CUDA graphs on as in the issue's reference). Models
# are random-weight files with the real shapes, written once by `helix-bg synth`
# into ~/.cache/helix/synth (HX_SYNTH_DIR) and reused. Without LLAMA_BENCH only
# helix runs. llama.cpp is a peer built outside this repository (never vendored).
set -euo pipefail
cd "$(dirname "$0")/.."
P=512; N=128; R=3; T=2; CUDA=0
while [ $# -gt 0 ]; do
  case "$1" in
    -p) P=$2; shift 2;; -n) N=$2; shift 2;; -r) R=$2; shift 2;; -t) T=$2; shift 2;;
    --cuda) CUDA=1; shift;;
    -h|--help) sed -n '2,16p' "$0"; exit 0;;
    -*) echo "unknown option $1" >&2; exit 2;;
    *) break;;
  esac
done
specs=("$@")
if [ ${#specs[@]} -eq 0 ] && [ $CUDA = 1 ]; then
  specs=(qwen3-0.6b:q4_k_m qwen3-0.6b:q8_0 qwen3-0.6b:q4_0 llama-3.2-1b:q4_k_m smollm-135m:q4_0 llama-3.1-8b:q4_k_m)
fi
[ ${#specs[@]} -gt 0 ] || specs=(smollm-135m:q8_0 smollm-135m:q4_0 smollm-135m:q4_k_m
                                 qwen3-0.6b:q8_0 qwen3-0.6b:q4_0 qwen3-0.6b:q4_k_m)
BIN=${HX_BIN:-build/helix-bg}
LB=${LLAMA_BENCH:-}
SYN=${HX_SYNTH_DIR:-$HOME/.cache/helix/synth}
mkdir -p "$SYN"
date=$(date -u +%F)
commit=${HX_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
device="$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -1) $(nproc)-core, $T threads"
hx_dev=(); lb_dev=()
if [ $CUDA = 1 ]; then
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  hx_dev=(--device cuda); lb_dev=(-ngl 99 -fa 1)
fi
out=${HX_RESULTS:-bench/results.jsonl}
table=$(mktemp)
trap 'rm -f "$table"' EXIT

jsonl() { # engine model mix test tokens_per_s
  printf '{"date": "%s", "commit": "%s", "device": "%s", "engine": "%s", "model": "%s", "mix": "%s", "test": "%s", "tokens_per_s": %s, "threads": %s}\n' \
    "$date" "$commit" "$device" "$1" "$2" "$3" "$4" "$5" "$T" >> "$out"
}

echo "# uptime before: $(uptime)"
for spec in "${specs[@]}"; do
  IFS=: read -r preset mix sp sn <<< "$spec"
  p=${sp:-$P}; n=${sn:-$N}
  f="$SYN/$preset-$mix.gguf"
  if [ ! -s "$f" ]; then
    echo "# synth $preset $mix -> $f" >&2
    "$BIN" synth --preset "$preset" --type "$mix" -o "$f.tmp" -t "$T" >&2 && mv "$f.tmp" "$f"
  fi
  declare -A hxv=() lbv=()
  echo "# $preset $mix: helix-bg bench -p $p -n $n -r $R -t $T" >&2
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    read -r test tps < <(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["test"], j["tokens_per_s"])' "$line")
    hxv[$test]=$tps
    jsonl helix "$preset" "$mix" "$test" "$tps"
  done < <("$BIN" bench -m "$f" "${hx_dev[@]}" -p "$p" -n "$n" -r "$R" -t "$T" --json)
  if [ -n "$LB" ]; then
    echo "# $preset $mix: llama-bench -p $p -n $n -r $R -t $T" >&2
    while IFS= read -r line; do
      [ -n "$line" ] || continue
      read -r test tps < <(python3 -c '
import json,sys
j=json.loads(sys.argv[1]); p=j.get("n_prompt",0); g=j.get("n_gen",0)
print(("pp%d" % p) if p else ("tg%d" % g), j["avg_ts"])' "$line")
      lbv[$test]=$tps
      jsonl llama.cpp "$preset" "$mix" "$test" "$tps"
    done < <("$LB" -m "$f" "${lb_dev[@]}" -p "$p" -n "$n" -r "$R" -t "$T" -o jsonl 2>/dev/null)
  fi
  for test in "pp$p" "tg$n"; do
    h=${hxv[$test]:-}; l=${lbv[$test]:-}
    python3 -c '
import sys
m, x, t, h, l = sys.argv[1:]
f = lambda v: "%.1f" % float(v) if v else "-"
r = "%.2fx" % (float(h) / float(l)) if h and l else "-"
print("| %s | %s | %s | %s | %s | %s |" % (m, x, t, f(h), f(l), r))' "$preset" "$mix" "$test" "$h" "$l" >> "$table"
  done
  unset hxv lbv
done
echo "# uptime after: $(uptime)"
echo "| model | mix | test | helix tok/s | llama.cpp tok/s | ratio |"
echo "|---|---|---|---:|---:|---:|"
cat "$table"
