#!/usr/bin/env python3
"""hf_make_tiny.py OUT_DIR [SHARED_DIR] — tiny random Hugging Face decoder folders and their
float64 transformers references, for tests/hf_decoders.sh (checked by test_hf_decoders).

For each case OUT_DIR/<name>/ holds what save_pretrained writes (config.json, safetensors,
sharded for one case) plus the real tokenizer of the family copied from SHARED_DIR/tokenizers
(so vocabulary sizes are real), and OUT_DIR/<name>.ref.json holds:
  ids        the prompt token ids (random, fixed seed; BOS first where the family uses one)
  greedy     16 greedy ids after the prompt, float64 forward over the whole sequence each step
  argmax     the argmax at every prompt position
  gap        per greedy step, top-1 minus top-2 logit (near-ties make greedy ids fragile)
  text, text_ids   a string and its ids from transformers' tokenizer of the folder (specials added)
and OUT_DIR/<name>.last.f32 the float64 logits of the last prompt position, stored as f32.
Weights are random with heavy enough scale that logits spread; norm weights are randomized too.
"""
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import AutoTokenizer

N_GREEDY = 16


def cases():
    common = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256, rms_norm_eps=1e-6, initializer_range=0.08)
    return [
        # llama: Llama 3 vocabulary, q/k/v/o biases, linear rope scaling, untied output, f32
        dict(name="llama", family="llama3", cls=transformers.LlamaConfig, dtype=torch.float32,
             cfg=dict(common, num_hidden_layers=2, rope_theta=500000.0, attention_bias=True,
                      rope_scaling={"rope_type": "linear", "factor": 2.0}, tie_word_embeddings=False,
                      bos_token_id=128000, eos_token_id=128001)),
        # qwen2: qkv biases, tied, bf16 weights, sharded into several safetensors files
        dict(name="qwen2", family="qwen3", cls=transformers.Qwen2Config, dtype=torch.bfloat16, shard="300KB",
             cfg=dict(common, num_hidden_layers=2, rope_theta=1000000.0, tie_word_embeddings=True)),
        # qwen3: head_dim 32 != hidden / heads, q/k norms, tied, f16 weights
        dict(name="qwen3", family="qwen3", cls=transformers.Qwen3Config, dtype=torch.float16,
             cfg=dict(common, num_hidden_layers=2, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=True)),
        # gemma3: sliding layers (window 4, rope 10000) and a global one (rope 1e6), (1 + w) norms,
        # query_pre_attn_scalar != head_dim, final softcap (attn_logit_softcapping is set but transformers'
        # Gemma3 does not apply it), embeddings scaled by sqrt(hidden), f32
        dict(name="gemma3", family="gemma3", cls=transformers.Gemma3TextConfig, dtype=torch.float32,
             cfg=dict(common, num_hidden_layers=3, head_dim=16, num_key_value_heads=1, sliding_window=4,
                      layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                      rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                       "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                      query_pre_attn_scalar=24, final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
                      hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0)),
    ]


def make_folder(c, seed, out, shared, shard=True):
    """Case c as a folder OUT/<name>: random weights (generator seeded with seed) rounded to the
    case's dtype, save_pretrained (sharded when the case says so and shard), the family's real
    tokenizer files copied in. Returns (folder, config, vocabulary size, the generator, to draw
    more weights from it)."""
    tok_json = os.path.join(shared, "tokenizers", c["family"] + ".tokenizer.json")
    tok_cfg = os.path.join(shared, "tokenizers", c["family"] + ".tokenizer_config.json")
    tj = json.load(open(tok_json))
    vocab = max([max(tj["model"]["vocab"].values()) + 1] + [t["id"] + 1 for t in tj.get("added_tokens", [])])
    cfg = c["cls"](vocab_size=vocab, **c["cfg"])
    cfg._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):  # gemma: the weight is an offset from 1; others: the scale
                p.copy_((0.0 if c["family"] == "gemma3" else 1.0) + 0.2 * torch.randn(p.shape, generator=g))
            elif n.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))
    # round the weights to the stored dtype; references are computed from the saved folder as
    # transformers loads it (a model cast to f16 and back would keep f16 rope frequencies,
    # which a fresh load recomputes in f32)
    model = model.to(c["dtype"])
    d = os.path.join(out, c["name"])
    shutil.rmtree(d, ignore_errors=True)
    kw = {"max_shard_size": c["shard"]} if shard and "shard" in c else {}
    model.save_pretrained(d, **kw)
    shutil.copy(tok_json, os.path.join(d, "tokenizer.json"))
    shutil.copy(tok_cfg, os.path.join(d, "tokenizer_config.json"))
    return d, cfg, vocab, g


def main():
    out = sys.argv[1]
    shared = sys.argv[2] if len(sys.argv) > 2 else "../shared"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    for ci, c in enumerate(cases()):
        d, cfg, vocab, _ = make_folder(c, 100 + ci, out, shared)
        model = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager")
        model = model.to(torch.float64).eval()

        gi = torch.Generator().manual_seed(7)
        ids = torch.randint(0, min(vocab, 30000), (12,), generator=gi).tolist()
        if c["family"] in ("llama3", "gemma3"):
            ids = [cfg.bos_token_id] + ids
        seq = list(ids)
        greedy, gaps = [], []
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0]
            last = logits[-1].clone()
            argmax = logits.argmax(-1).tolist()
            for _ in range(N_GREEDY):
                lo = model(torch.tensor([seq])).logits[0, -1]
                top = torch.topk(lo, 2)
                nxt = int(top.indices[0])
                gaps.append(float(top.values[0] - top.values[1]))
                greedy.append(nxt)
                seq.append(nxt)
        tk = AutoTokenizer.from_pretrained(d)
        text = "Hello world! Ünïcödé 123 \u4e2d\u6587"
        text_ids = tk(text)["input_ids"]
        ref = dict(ids=ids, greedy=greedy, argmax=argmax, gap=gaps, text=text, text_ids=text_ids,
                   dtype=str(c["dtype"]).replace("torch.", ""), transformers=transformers.__version__,
                   torch=torch.__version__)
        json.dump(ref, open(os.path.join(out, c["name"] + ".ref.json"), "w"))
        last.to(torch.float32).numpy().tofile(os.path.join(out, c["name"] + ".last.f32"))
        print(f"{c['name']}: vocab {vocab}, {len(ids)} prompt ids, greedy {greedy[:6]}..., min gap {min(gaps):.3g}")


if __name__ == "__main__":
    main()
