#!/usr/bin/env bash
# CPU throughput of the BERT encoder (all-MiniLM-L6-v2: 6 layers, 384, 12 x 64 heads, FFN 1536,
# f32) against PyTorch fp32 BertModel, same sentences, same weights, same thread count, measured in
# one run with the two sides interleaved (best of REPEAT each).
#   bash bench/bert_cpu_bench.sh [N=1000] [REPEAT=3] [THREADS=2]
# Sentences: bench/make_sentences.py N (deterministic, 10-60 words). Batch 32 over all N, batch 1
# over the first N1 (env, default 200). Both sides: tokenize, sort by length, mean pooling + L2.
# helix: wall clock of the whole `helix-bg embed -m MODEL --batch B -t THREADS < s.txt > /dev/null`
#   (model load and weight packing included); MODEL = the Hugging Face folder ($HX_MINILM,
#   default ~/.cache/helix/all-MiniLM-L6-v2), or $HX_MODEL (e.g. the f32 GGUF).
# torch: bench/bert_torch_bench.py --model $HX_MINILM: tokenization + forward + pooling timed in
#   process after a warm-up (model load not included).
# HX_BENCH_SYNTH=1 also runs random weights of the same shape on both sides (helix-bg synth
# --preset minilm-l6 --tokenizer $HX_SYNTH_TOK, default ../shared's tiny-bert-shared.gguf, which carries
# bert-base-uncased's WordPiece vocabulary, the one MiniLM uses): dense f32, the speed does not
# depend on the values.
# TYPES (default "f32 int8"): helix's --embed-type values, each run in every round beside torch.
# Each line gives the best and the median of the rounds.
# JSONL=FILE appends one bench/results.jsonl record per side and batch (tokens_per_s = sentences/s,
#   the median; mix = helix's type, f32 for torch).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}; R=${2:-3}; TH=${3:-2}; N1=${N1:-200}
BIN=${HX_BIN:-build/helix-bg}
PY=${PY:-/work/venv/bin/python}
[ -x "$PY" ] || PY=/tmp/hf-venv/bin/python
HF=${HX_MINILM:-$HOME/.cache/helix/all-MiniLM-L6-v2}
HM=${HX_MODEL:-$HF}
[ -x "$BIN" ] || { echo "build helix-bg first ($BIN)"; exit 1; }
[ -f "$HF/vocab.txt" ] || { echo "no $HF/vocab.txt: set HX_MINILM to an all-MiniLM-L6-v2 folder"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 bench/make_sentences.py "$N" > "$tmp/s.txt"
head -n "$N1" "$tmp/s.txt" > "$tmp/s1.txt"

TYPES=${TYPES:-f32 int8}
helix_rate() { # MODEL FILE BATCH TYPE -> sentences/s (wall clock of the process)
    local n t0 t1
    n=$(wc -l < "$2")
    t0=$(date +%s.%N)
    "$BIN" embed -m "$1" --batch "$3" -t "$TH" --format f32 --embed-type "$4" < "$2" > /dev/null 2>&1
    t1=$(date +%s.%N)
    echo "$n / ($t1 - $t0)" | bc -l | xargs printf '%.1f\n'
}
torch_rate() { # (--model DIR | --tokenizer DIR) FILE BATCH -> sentences/s
    "$PY" bench/bert_torch_bench.py "$1" "$2" --batch "$4" --threads "$TH" --repeat 1 < "$3" 2>/dev/null |
        sed -n 's/.* best \([0-9.]*\) sent\/s.*/\1/p'
}
best() { printf '%s\n' "$@" | sort -g | tail -1; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }

load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load before: $load0"
echo "sentences: $N (batch 32), first $N1 (batch 1); threads $TH; $R rounds, helix ($TYPES) and torch interleaved"
echo "helix model: $HM"
results=()
run_pair() { # LABEL HELIX_MODEL TORCH_FLAG TORCH_DIR
    local label=$1 hm=$2 tf=$3 td=$4
    for b in 32 1; do
        local f="$tmp/s.txt"; [ "$b" = 1 ] && f="$tmp/s1.txt"
        local ts=() ty
        declare -A hs=()
        for ((i = 0; i < R; i++)); do
            for ty in $TYPES; do hs[$ty]+="$(helix_rate "$hm" "$f" "$b" "$ty") "; done
            ts+=("$(torch_rate "$tf" "$td" "$f" "$b")")
        done
        local t tm
        t=$(best "${ts[@]}"); tm=$(median "${ts[@]}")
        printf '%-14s batch %2d: torch          best %7.1f median %7.1f sent/s (runs: %s)\n' "$label" "$b" "$t" "$tm" "${ts[*]}"
        for ty in $TYPES; do
            local h hm_
            # shellcheck disable=SC2086
            h=$(best ${hs[$ty]}); hm_=$(median ${hs[$ty]})
            printf '%-14s batch %2d: helix %-8s best %7.1f median %7.1f sent/s (runs: %s)  median helix/torch %.2fx\n' \
                "$label" "$b" "$ty" "$h" "$hm_" "${hs[$ty]% }" "$(echo "$hm_ / $tm" | bc -l)"
            if [ "$label" = "real weights" ]; then results+=("embed-b$b helix $ty $hm_"); fi
        done
        if [ "$label" = "real weights" ]; then results+=("embed-b$b pytorch f32 $tm"); fi
        unset hs
    done
}
run_pair "real weights" "$HM" --model "$HF"
if [ "${HX_BENCH_SYNTH:-0}" = 1 ]; then
    "$BIN" synth --preset minilm-l6 --type f32 --tokenizer "${HX_SYNTH_TOK:-../shared/models/ref-tiny/tiny-bert-shared.gguf}" \
        -o "$tmp/minilm.gguf" >/dev/null
    run_pair "synthetic f32" "$tmp/minilm.gguf" --tokenizer "$HF"
fi
load1=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load after: $load1"
if [ -n "${JSONL:-}" ]; then
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    for r in "${results[@]}"; do
        read -r test engine mix rate <<< "$r"
        printf '{"date": "%s", "commit": "%s", "device": "cpu: %s, %s threads, load %s -> %s", "engine": "%s", "model": "all-minilm-l6-v2", "mix": "%s", "test": "%s", "tokens_per_s": %s, "sentences_per_s": %s, "unit": "sentences/s (median of %s rounds)", "threads": %s, "sentences": %s}\n' \
            "$(date -u +%F)" "$commit" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) $(nproc) vCPU (shared)" "$TH" \
            "$(echo "$load0" | cut -d' ' -f1)" "$(echo "$load1" | cut -d' ' -f1)" "$engine" "$mix" "$test" "$rate" "$rate" "$R" "$TH" \
            "$([ "$test" = embed-b1 ] && echo "$N1" || echo "$N")" >> "$JSONL"
    done
fi
