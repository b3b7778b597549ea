#!/usr/bin/env python3
"""lora_make_adapter.py — a deterministic PEFT LoRA adapter folder for a llama-architecture model,
written with the standard library only (no torch, no numpy), so a test can rebuild the exact same
bytes anywhere (tests/lora_llama.sh checks its sha256 against tests/data/lora_llama_ref.json).

  python3 tests/lora_make_adapter.py OUT_DIR --layers 30 --embd 576 --ff 1536 --heads 9 --kv-heads 3 \
      [--head-dim 64] [--rank 8] [--alpha 16] [--seed 1] [--a-amp 1] [--b-amp 0.02] \
      [--targets q_proj,...,down_proj,embed_tokens,lm_head --vocab 49152] [--embd-b-amp B] [--head-b-amp B]

Writes what PEFT's save_pretrained writes for LoraConfig(r, lora_alpha, target_modules = --targets,
by default the 7 llama projections) on LlamaForCausalLM:
  OUT_DIR/adapter_config.json
  OUT_DIR/adapter_model.safetensors   F32 tensors, PEFT's names and torch's shapes:
      base_model.model.model.layers.L.self_attn.{q,k,v,o}_proj.lora_A.weight  (r, n_in)
      base_model.model.model.layers.L.mlp.{gate,up,down}_proj.lora_B.weight   (n_out, r)
      base_model.model.model.embed_tokens.lora_embedding_A                    (r, n_vocab)
      base_model.model.model.embed_tokens.lora_embedding_B                    (n_embd, r)
      base_model.model.lm_head.lora_A.weight (r, n_embd), .lora_B.weight      (n_vocab, r)
(PEFT names an nn.Embedding's pair lora_embedding_A/B, without ".weight", and keeps A as (r, vocab):
row tok of the embedding gains s * B A[:, tok]. llama.cpp's GGUF stores that A transposed,
token_embd.weight.lora_a ne [r, n_vocab]; both loaders are checked against each other.)
Values: uniform in [-amp, amp) from splitmix64 (seed), drawn layer by layer in the order above, then
embed_tokens, then lm_head (so the default targets give the same bytes as before). A's amp =
a_amp * sqrt(3 / n_in) (so each of A x's r values has about the RMS of x; for embed_tokens, whose
input is one-hot, a_amp * sqrt(3)), B's = b_amp (embed_tokens: embd_b_amp, lm_head: head_b_amp, both
b_amp by default). Rows are in Hugging Face's order (q/k not permuted): a converter for a llama.cpp
GGUF base must permute B's q/k rows, which is what the comparison with llama.cpp checks. Prints the
sha256 of adapter_model.safetensors.
"""
import argparse
import hashlib
import json
import math
import os
import struct

M64 = (1 << 64) - 1
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def splitmix64(state):
    """Yields 64-bit outputs of splitmix64 from state (Steele, Lea, Flood 2014)."""
    while True:
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        yield z ^ (z >> 31)


def uniform(gen, n, amp):
    """n f32 values uniform in [-amp, amp), packed little-endian. The top 24 bits of each output
    make an exact float in [0, 1): the same bytes on every platform."""
    k = 2.0 * amp / (1 << 24)
    return struct.pack("<%df" % n, *[(next(gen) >> 40) * k - amp for _ in range(n)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--embd", type=int, required=True)
    ap.add_argument("--ff", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, required=True)
    ap.add_argument("--head-dim", type=int, default=0, help="default embd / heads")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--a-amp", type=float, default=1.0)
    ap.add_argument("--b-amp", type=float, default=0.02)
    ap.add_argument("--targets", default=",".join(PROJ), help="comma-separated PEFT target modules")
    ap.add_argument("--vocab", type=int, default=0, help="n_vocab (needed for embed_tokens and lm_head)")
    ap.add_argument("--embd-b-amp", type=float, default=None)
    ap.add_argument("--head-b-amp", type=float, default=None)
    a = ap.parse_args()
    targets = a.targets.split(",")
    bad = [t for t in targets if t not in PROJ + ["embed_tokens", "lm_head"]]
    if bad or len(set(targets)) != len(targets):
        ap.error("--targets: unknown or repeated module in %r" % a.targets)
    if ("embed_tokens" in targets or "lm_head" in targets) and a.vocab < 1:
        ap.error("--vocab is required with embed_tokens or lm_head")
    hd = a.head_dim or a.embd // a.heads
    q, kv, e, f = a.heads * hd, a.kv_heads * hd, a.embd, a.ff
    # (module, n_in, n_out) in PEFT's order within a layer
    mods = [("self_attn.q_proj", e, q), ("self_attn.k_proj", e, kv), ("self_attn.v_proj", e, kv),
            ("self_attn.o_proj", q, e), ("mlp.gate_proj", e, f), ("mlp.up_proj", e, f), ("mlp.down_proj", f, e)]
    mods = [m for m in mods if m[0].split(".")[1] in targets]
    gen = splitmix64(a.seed)
    header, blobs, off = {}, [], 0
    pairs = []  # (name of A, shape, amp, name of B, shape, amp) in drawing order
    for L in range(a.layers):
        for mod, n_in, n_out in mods:
            base = "base_model.model.model.layers.%d.%s" % (L, mod)
            pairs.append((base + ".lora_A.weight", [a.rank, n_in], a.a_amp * math.sqrt(3.0 / n_in),
                          base + ".lora_B.weight", [n_out, a.rank], a.b_amp))
    if "embed_tokens" in targets:
        base = "base_model.model.model.embed_tokens"
        pairs.append((base + ".lora_embedding_A", [a.rank, a.vocab], a.a_amp * math.sqrt(3.0),
                      base + ".lora_embedding_B", [e, a.rank], a.b_amp if a.embd_b_amp is None else a.embd_b_amp))
    if "lm_head" in targets:
        base = "base_model.model.lm_head"
        pairs.append((base + ".lora_A.weight", [a.rank, e], a.a_amp * math.sqrt(3.0 / e),
                      base + ".lora_B.weight", [a.vocab, a.rank], a.b_amp if a.head_b_amp is None else a.head_b_amp))
    for p in pairs:
        for name, shape, amp in (p[:3], p[3:]):
            data = uniform(gen, shape[0] * shape[1], amp)
            header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(data)]}
            blobs.append(data)
            off += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # safetensors pads the header to 8 bytes
    os.makedirs(a.out, exist_ok=True)
    st = os.path.join(a.out, "adapter_model.safetensors")
    with open(st, "wb") as fo:
        fo.write(struct.pack("<Q", len(h)))
        fo.write(h)
        for b in blobs:
            fo.write(b)
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": None,
           "r": a.rank, "lora_alpha": a.alpha, "lora_dropout": 0.0, "bias": "none",
           "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "init_lora_weights": False,
           "target_modules": targets,
           "modules_to_save": None, "layers_to_transform": None, "rank_pattern": {}, "alpha_pattern": {}}
    with open(os.path.join(a.out, "adapter_config.json"), "w") as fo:
        json.dump(cfg, fo, indent=2)
        fo.write("\n")
    dig = hashlib.sha256()
    with open(st, "rb") as fi:
        for b in iter(lambda: fi.read(1 << 20), b""):
            dig.update(b)
    print(dig.hexdigest())


if __name__ == "__main__":
    main()
