#!/usr/bin/env bash
# Compare helix-bg embed with an independent float64 reference (bench/minilm_ref.py:
# HF tokenizers + NumPy BertModel + sentence-transformers pooling) on N sentences.
#   bash bench/minilm_compare.sh MODEL_DIR [N]
# Prints worst / mean cosine and token-id agreement. Needs numpy scipy tokenizers safetensors.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=$1; N=${2:-1000}
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d)
python3 bench/make_sentences.py "$N" > "$tmp/s.txt"
python3 bench/minilm_ref.py "$DIR" < "$tmp/s.txt" > "$tmp/ref.jsonl"
"$BIN" embed -m "$DIR" < "$tmp/s.txt" > "$tmp/ours.jsonl"
python3 - "$tmp/ref.jsonl" "$tmp/ours.jsonl" <<'PY'
import json, sys
import numpy as np
ref = [json.loads(l) for l in open(sys.argv[1])]
ours = [json.loads(l) for l in open(sys.argv[2])]
assert len(ref) == len(ours), (len(ref), len(ours))
cos = np.array([float(np.dot(r["embedding"], o)) for r, o in zip(ref, ours)])
print(f"{len(cos)} sentences: cosine worst {cos.min():.7f}, mean {cos.mean():.7f}, below 0.9999: {(cos < 0.9999).sum()}")
sys.exit(0 if cos.min() > 0.9999 else 1)
PY
rm -rf "$tmp"
