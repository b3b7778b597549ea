#!/usr/bin/env bash
# helix-bg embed end to end on the CPU, two builds interleaved (before / after a change):
#   bash bench/embed_e2e_cpu.sh BIN_A BIN_B MODEL [N=1000] [BATCHES="1 32 256"] [ROUNDS=3] [FORMATS="f32 json"]
# N sentences from bench/make_sentences.py. Per run: the texts/s helix-bg reports (hx_embed:
# tokenization, encoder, pooling) and the wall clock of the whole process (load, read, embed,
# write). Also says whether A and B wrote the same bytes.
set -euo pipefail
A=$1 B=$2 M=$3 N=${4:-1000} BATCHES=${5:-"1 32 256"} ROUNDS=${6:-3} FORMATS=${7:-"f32 json"}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 "$(dirname "$0")/make_sentences.py" "$N" > "$tmp/s.txt"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  for b in $BATCHES; do
    for f in $FORMATS; do
      for side in A B; do
        bin=$A; [ $side = B ] && bin=$B
        t0=$(date +%s.%N)
        "$bin" embed -m "$M" --batch "$b" --format "$f" < "$tmp/s.txt" > "$tmp/out.$side" 2> "$tmp/err"
        t1=$(date +%s.%N)
        rate=$(awk '{for (i = 2; i <= NF; i++) if ($i ~ /^texts\/s/) { print $(i - 1); exit }}' "$tmp/err")
        echo "round $r side $side batch $b format $f texts_per_s ${rate%,} wall_s $(echo "$t1 - $t0" | bc)"
      done
      cmp -s "$tmp/out.A" "$tmp/out.B" && echo "  same bytes" || echo "  OUTPUTS DIFFER"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
