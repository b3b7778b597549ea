#!/usr/bin/env bash
# Issue 22's KB pass with a neural embedder on the GPU, on a machine with
# nothing but the repository (no model download, no network):
#   bash bench/kb_gpu_device.sh [N=1000000] [DEVICE=cuda]
# from the repository root, with a CUDA build's helix-bg in .devbin/ (HX_BIN
# to use another). The model: MODEL=PATH (BERT .gguf or HF folder), else the
# MiniLM-L6 shape with random f32 weights and the bert-base-uncased vocabulary,
# made here by helix-bg synth from $HX_SHARED/tokenizers/vocab-gguf/
# ggml-vocab-bert-bge.gguf (HX_SHARED: .devshared, else shared, else ../shared):
# the same encoder work as all-MiniLM-L6-v2, and the same tokens.
# bench/kb_bench.sh then generates N entries (12 topics, 10-60 words) and runs
# one-shot --embed-model M --embed-device DEVICE --allpairs-device DEVICE
# --no-think for the passes
#   cold     embed all N, compare all pairs
#   +100     100 entries appended: incremental (100 x N pairs)
#   +10000   10,000 more appended: incremental (10,000 x N pairs)
# printing per pass: total, embedding (the embedder plus reading data.log and
# the cache) and pair seconds, the all-pairs device, peak RSS, the all-pairs
# stage's own line, and the embedder alone (seconds, texts/s). Last, one line
# for the goal: the cold pass's embedding stage under 60 s for 1M entries.
# JSON lines (bench/results.jsonl's form) go to $OUT/kb_gpu.jsonl when OUT is set.
# DEVICE=cpu runs the same on the CPU (a small N: the check of the script).
set -euo pipefail
N=${1:-1000000}; DEV=${2:-cuda}
case $DEV in cpu|cuda) ;; *) echo "kb_gpu_device.sh: device '$DEV': cpu or cuda" >&2; exit 2 ;; esac
export HX_BIN=${HX_BIN:-.devbin/helix-bg}
[ -x "$HX_BIN" ] || { echo "kb_gpu_device.sh: $HX_BIN: not an executable (build helix-bg, or set HX_BIN)" >&2; exit 2; }
SHARED=${HX_SHARED:-.devshared}; [ -d "$SHARED" ] || SHARED=shared; [ -d "$SHARED" ] || SHARED=../shared
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ -n "${MODEL:-}" ]; then
  M=$MODEL; export MODEL_LABEL=$(basename "$MODEL")
else
  VOCAB=$SHARED/tokenizers/vocab-gguf/ggml-vocab-bert-bge.gguf
  [ -f "$VOCAB" ] || { echo "kb_gpu_device.sh: $VOCAB absent (set HX_SHARED, or MODEL)" >&2; exit 2; }
  M=$tmp/minilm-l6-random.gguf
  "$HX_BIN" synth --preset minilm-l6 --type f32 --tokenizer "$VOCAB" -o "$M" > /dev/null
  export MODEL_LABEL="minilm-l6 shape, random f32, bert-base-uncased vocab"
  # Random weights put most pairs of these texts at cosine 0.7-0.95 (median 0.84 at 3,000 entries), so
  # the BERT defaults (near-duplicates > 0.69, links 0.53-0.69) would make ~0.1% of the 5e11 pairs at
  # 1M candidates for the link window (hundreds of millions to rescore and visit); at 0.96-0.97 (5e-6
  # of the pairs at 3,000) they are few, and the tiles' products are the same work.
  export KB_ARGS=${KB_ARGS-"--dup 0.97 --link-low 0.96 --link-high 0.97"}
fi
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
echo "kb_gpu_device: $N entries, embedder $MODEL_LABEL on $DEV${GPU:+ ($GPU)}, $(nproc) CPUs," \
     "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)${KB_ARGS:+, one-shot $KB_ARGS}"
s=$(date +%s.%N)
KB_PASSES="cold +100 +10000" bash bench/kb_bench.sh "$N" "$(nproc)" --json --device "$DEV" --embed-model "$M" \
  > "$tmp/out.txt" || { cat "$tmp/out.txt"; exit 1; }
grep -v '^{' "$tmp/out.txt"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  grep '^{' "$tmp/out.txt" | python3 -c '
import datetime, json, sys
gpu, label = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    r = dict({"date": datetime.date.today().isoformat(), "engine": "helix"}, **json.loads(line))
    r["device"] = gpu or r["allpairs_device"]; r["embed_model"] = label; r["one_shot_args"] = sys.argv[3]
    print(json.dumps(r))' "$GPU" "$MODEL_LABEL" "${KB_ARGS:-}" >> "$OUT/kb_gpu.jsonl"
  echo "wrote $OUT/kb_gpu.jsonl"
fi
grep '^{' "$tmp/out.txt" | python3 -c '
import json, sys
n = int(sys.argv[1])
for line in sys.stdin:
    r = json.loads(line)
    if r["pass"] == "cold" and r["embedder_seconds"]:
        t = r["embed_seconds"] * 1e6 / n
        print("goal: cold pass embedding stage %.2f s for %d entries (embedder alone %.2f s, %d texts/s; all-pairs part %.2f s),"
              " %.1f s per 1M entries: %s 60 s" % (r["embed_seconds"], n, r["embedder_seconds"], r["embed_texts_per_s"],
                                                   r["pairs_seconds"], t, "under" if t < 60 else "NOT under"))' "$N"
echo "kb_gpu_device: $(python3 -c 'import sys, time; print("%.1f" % (time.time() - float(sys.argv[1])))' "$s") s in all" \
     "(the model and data.log made here included)"
