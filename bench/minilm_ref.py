#!/usr/bin/env python3
"""Float64 reference embeddings for a Hugging Face BERT folder (all-MiniLM-L6-v2).

Independent of helix: tokenization by the Hugging Face `tokenizers` library from
the folder's tokenizer.json (what sentence-transformers' fast tokenizer uses),
the BertModel forward in NumPy float64 straight from model.safetensors, then
sentence-transformers' pooling (mean over the attention mask) and L2 norm.

  python3 bench/minilm_ref.py MODEL_DIR < sentences.txt > ref.jsonl

Each output line: {"ids": [...], "embedding": [...]}. Needs numpy, scipy, tokenizers,
safetensors (pip). Max length 256 tokens, as helix's default truncation.
"""
import json
import math
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer


def gelu(x):
    from scipy.special import erf  # float64, vectorized
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def main():
    d = sys.argv[1]
    cfg = json.load(open(f"{d}/config.json"))
    W = {k.removeprefix("bert."): v.astype(np.float64) for k, v in load_file(f"{d}/model.safetensors").items()}
    tok = Tokenizer.from_file(f"{d}/tokenizer.json")
    tok.enable_truncation(256)
    tok.no_padding()
    H, eps = cfg["num_attention_heads"], cfg["layer_norm_eps"]
    for line in sys.stdin:
        text = line.rstrip("\n")
        ids = tok.encode(text).ids
        T = len(ids)
        x = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][:T] \
            + W["embeddings.token_type_embeddings.weight"][0]
        x = layernorm(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], eps)
        for il in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{il}."
            lin = lambda n, v: v @ W[p + n + ".weight"].T + W[p + n + ".bias"]
            q, k, v = lin("attention.self.query", x), lin("attention.self.key", x), lin("attention.self.value", x)
            D = q.shape[1] // H
            q, k, v = (a.reshape(T, H, D).transpose(1, 0, 2) for a in (q, k, v))
            s = q @ k.transpose(0, 2, 1) / math.sqrt(D)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(1, 0, 2).reshape(T, H * D)
            x = layernorm(x + lin("attention.output.dense", a), W[p + "attention.output.LayerNorm.weight"],
                          W[p + "attention.output.LayerNorm.bias"], eps)
            h = gelu(lin("intermediate.dense", x))
            x = layernorm(x + lin("output.dense", h), W[p + "output.LayerNorm.weight"], W[p + "output.LayerNorm.bias"], eps)
        e = x.mean(0)
        e /= np.linalg.norm(e)
        print(json.dumps({"ids": ids, "embedding": [round(float(t), 9) for t in e]}))


if __name__ == "__main__":
    main()
