#!/usr/bin/env bash
# Issue 22's end-to-end embedding figures on a GPU machine, in one call:
#   bash bench/embed_e2e_device.sh BUILD_DIR [OUT.jsonl] [N=20000]
# BUILD_DIR: a CUDA build (helix-bg, embed_encoder_bench). MODEL=PATH (BERT .gguf or HF folder) for
# real weights; by default the MiniLM-L6 shape with random f32 weights and the bert-base-uncased
# vocabulary (helix-bg synth + shared/tokenizers), PyTorch getting the same vocabulary and shape.
# On N sentences of bench/make_sentences.py:
#   1. helix-bg embed --device cuda --batch B --format f32, B = 1, 32, 256, 3 runs each: the texts/s
#      it reports (hx_embed: tokenization, encoder, rows in place) and with reading and writing;
#   2. embed_encoder_bench at the same B: the encoder alone (batches in flight, and one host wait
#      per batch) beside hx_embed in the same process (N_ENC1 sentences at B = 1);
#   3. checks: GPU rows against CPU rows for the first 500 sentences (cosine >= 0.9999 in order),
#      batch 1 against batch 256 on the GPU (first 2000 rows);
#   4. PyTorch (bench/bert_torch_bench.py --device cuda --fp16) at the same B if torch imports
#      (N_T1 sentences at B = 1).
# One JSON object per figure goes to OUT (default $OUT/embed_e2e.jsonl, else ./embed_e2e.jsonl).
set -uo pipefail
BUILD=${1:?usage: embed_e2e_device.sh BUILD_DIR [OUT.jsonl] [N]}
JSONL=${2:-${OUT:-.}/embed_e2e.jsonl}
N=${3:-20000} N_ENC1=${N_ENC1:-5000} N_T1=${N_T1:-5000}
HX=$BUILD/helix-bg ENC=$BUILD/embed_encoder_bench
SHARED=${HX_SHARED:-shared}; [ -d "$SHARED" ] || SHARED=../shared
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 "$here/make_sentences.py" "$N" > "$tmp/s.txt"
if [ -n "${MODEL:-}" ]; then
  M=$MODEL; LABEL=$(basename "$MODEL"); TORCH_ARGS=(--model "$MODEL")
else
  "$HX" synth --preset minilm-l6 --type f32 --tokenizer "$SHARED/tokenizers/vocab-gguf/ggml-vocab-bert-bge.gguf" \
    -o "$tmp/minilm.gguf" >&2 || exit 1
  mkdir "$tmp/tok" && cp "$SHARED/tokenizers/bert-base-uncased.vocab.txt" "$tmp/tok/vocab.txt" &&
    echo '{"do_lower_case": true, "model_max_length": 512}' > "$tmp/tok/tokenizer_config.json"
  M=$tmp/minilm.gguf; LABEL="minilm-l6 shape, random f32, bert-base-uncased vocab"; TORCH_ARGS=(--tokenizer "$tmp/tok")
fi
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
R=$tmp/raw.txt; : > "$R"
echo "device: $DEV, commit $COMMIT, model: $LABEL, $N sentences, $(nproc) CPUs"
for b in 1 32 256; do
  for run in 1 2 3; do
    t0=$(date +%s.%N)
    "$HX" embed -m "$M" --device cuda --batch $b --format f32 < "$tmp/s.txt" > "$tmp/gpu$b.f32" 2> "$tmp/err" ||
      { cat "$tmp/err"; exit 1; }
    t1=$(date +%s.%N)
    read -r rate io < <(awk '{k = 0; for (i = 2; i <= NF; i++) if ($i ~ /^texts\/s/) { v[k++] = $(i - 1) }}
                             END {gsub(",", "", v[0]); print v[0], v[1]}' "$tmp/err")
    echo "helix $b $run $rate $io $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" | tee -a "$R"
  done
done
for b in 1 32 256; do
  if [ $b = 1 ]; then head -n "$N_ENC1" "$tmp/s.txt" > "$tmp/enc.txt"; else cp "$tmp/s.txt" "$tmp/enc.txt"; fi
  "$ENC" "$M" $b $([ $b = 1 ] && echo 1 || echo 3) cuda < "$tmp/enc.txt" | tee -a "$tmp/enc.jsonl"
done
head -n 500 "$tmp/s.txt" | "$HX" embed -m "$M" --device cpu --format f32 > "$tmp/cpu.f32" 2>/dev/null
TORCH=none
if python3 -c "import torch, transformers; assert torch.cuda.is_available()" 2>/dev/null; then
  TORCH=$(python3 -c "import torch; print(torch.__version__)")
  for b in 1 32 256; do
    if [ $b = 1 ]; then head -n "$N_T1" "$tmp/s.txt" > "$tmp/t.txt"; rep=2; else cp "$tmp/s.txt" "$tmp/t.txt"; rep=3; fi
    out=$(python3 "$here/bert_torch_bench.py" "${TORCH_ARGS[@]}" --batch $b --repeat $rep --threads "$(nproc)" \
          --device cuda --fp16 < "$tmp/t.txt" 2>&1 | tail -1)
    echo "$out"
    echo "torch $b $(echo "$out" | sed -n 's/.*torch: \([0-9]*\) sentences.* best \([0-9.]*\) sent\/s.*/\2 \1/p')" | tee -a "$R"
  done
else
  echo "PyTorch with CUDA not importable here: helix only"
fi
python3 - "$tmp" "$R" "$JSONL" "$DEV" "$COMMIT" "$LABEL" "$N" "$TORCH" <<'PY'
import array, datetime, json, math, sys
tmp, raw, jsonl, dev, commit, label, n, torch_v = sys.argv[1:9]
def rows(p):
    a = array.array("f"); a.frombytes(open(p, "rb").read()); return [a[i:i + dim] for i in range(0, len(a), dim)]
import os
dim = os.path.getsize(f"{tmp}/gpu256.f32") // 4 // int(n)
def cos(x, y):
    return sum(p * q for p, q in zip(x, y)) / math.sqrt(sum(p * p for p in x) * sum(q * q for q in y))
cpu, g1, g256 = rows(f"{tmp}/cpu.f32"), rows(f"{tmp}/gpu1.f32"), rows(f"{tmp}/gpu256.f32")
w_cpu = min(cos(a, b) for a, b in zip(cpu, g256))
w_b = min(cos(a, b) for a, b in zip(g1[:2000], g256[:2000]))
ok = len(g1) == len(g256) == int(n) and w_cpu >= 0.9999 and w_b >= 0.9999
print(f"check: {len(g256)} rows; GPU vs CPU worst cosine {w_cpu:.7f} (first {len(cpu)}), GPU batch 1 vs 256 "
      f"{w_b:.7f} (first 2000): {'PASS' if ok else 'FAIL'}")
date = datetime.date.today().isoformat()
base = {"date": date, "commit": commit, "device": dev, "model": label, "mix": "f32", "sentences": int(n)}
recs = {}
for line in open(raw):
    f = line.split()
    if f[0] == "helix":
        r = recs.setdefault(("helix", f[1]), {"runs": [], "io": [], "wall": []})
        r["runs"].append(float(f[3])); r["io"].append(float(f[4])); r["wall"].append(float(f[5]))
    elif f[0] == "torch" and len(f) >= 4:
        recs[("torch", f[1])] = {"runs": [float(f[2])], "n": int(f[3])}
with open(jsonl, "a") as out:
    for (eng, b), r in recs.items():
        rec = dict(base, engine="helix" if eng == "helix" else "pytorch", test=f"embed-e2e-b{b}", batch=int(b),
                   sentences_per_s=max(r["runs"]), tokens_per_s=max(r["runs"]))
        if eng == "helix":
            rec.update(unit="sentences/s (hx_embed as helix-bg embed reports it: tokenization included; best of 3)",
                       runs=r["runs"], with_io_sentences_per_s=max(r["io"]), process_wall_s=min(r["wall"]),
                       check_min_cosine_vs_cpu=round(w_cpu, 7), check_ok=ok)
        else:
            rec.update(mix="fp16", engine_version=torch_v, sentences=r["n"],
                       unit="sentences/s (bert_torch_bench.py --device cuda --fp16: tokenization included; best)")
        out.write(json.dumps(rec) + "\n")
    for line in open(f"{tmp}/enc.jsonl"):
        e = json.loads(line)
        if e["measure"] == "tokenize_1thread":
            e["batch"] = 0
        name = {"encoder_async": "encoder-async", "encoder_sync": "encoder-sync", "e2e": "inproc-e2e",
                "tokenize_1thread": "tokenize-1thread"}[e["measure"]]
        out.write(json.dumps(dict(base, engine="helix", test=f"embed-{name}-b{e['batch']}", batch=e["batch"],
                                  sentences=e["sentences"], sentences_per_s=e["sentences_per_s"],
                                  tokens_per_s=e["sentences_per_s"], unit="sentences/s (embed_encoder_bench, best)")) + "\n")
print(f"wrote {jsonl}")
PY
