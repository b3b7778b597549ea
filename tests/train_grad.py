#!/usr/bin/env python3
"""train_grad.py OUT_DIR [SHARED_DIR] — LoRA gradients by PyTorch autograd on tiny random Hugging Face
decoders, for tests/train_grad.sh (checked by test_train with HX_TRAIN_REF=OUT_DIR).

For each case of hf_make_tiny.py (llama untied with biases and linear rope scaling, qwen2 tied bf16,
qwen3 with q/k norms, gemma3 with sliding-window layers) it writes
  OUT_DIR/<name>/             the model folder
  OUT_DIR/<name>.lora/        a PEFT adapter (r 4, lora_alpha 8) on q/k/v/o/gate/up/down, A and B random
  OUT_DIR/<name>.train.json   {"ids": [...], "target": [0/1 per id], "rank": 4, "loss": mean cross-entropy}
  OUT_DIR/<name>.grads.f32    d(loss)/d(lora_A), d(lora_B) in float64 (stored as f32) for every layer, in
                              the order q, k, v, o, gate, up, down; A (r, in) then B (out, r) row-major
The loss is the mean cross-entropy of the target tokens (the completion), predicted from the previous
position; prompt tokens are masked (label -100), as a causal-LM fine-tune does.
"""
import json
import os
import shutil
import sys

import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_make_tiny  # noqa: E402

SLOTS = [("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"), ("self_attn", "o_proj"),
         ("mlp", "gate_proj"), ("mlp", "up_proj"), ("mlp", "down_proj")]


def main():
    out = sys.argv[1]
    shared = sys.argv[2] if len(sys.argv) > 2 else "../shared"
    os.makedirs(out, exist_ok=True)
    for ci, c in enumerate(hf_make_tiny.cases()):
        d, cfg, vocab, g = hf_make_tiny.make_folder(c, 300 + ci, out, shared, shard=False)

        targets = [s for _, s in SLOTS]
        base = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager")
        pm = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets,
                                             init_lora_weights=False))
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_" in n:
                    p.copy_(0.15 * torch.randn(p.shape, generator=g))
        ad = d + ".lora"
        shutil.rmtree(ad, ignore_errors=True)
        pm.save_pretrained(ad)

        # the reference from the saved files, in float64
        base = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager")
        pm = PeftModel.from_pretrained(base, ad, is_trainable=True).to(torch.float64)
        pm.train()  # dropout is 0: train mode changes nothing but lets gradients flow as in a fine-tune
        gi = torch.Generator().manual_seed(19 + ci)
        n_ids = 14
        ids = torch.randint(0, min(vocab, 30000), (n_ids,), generator=gi).tolist()
        target = [0] * 6 + [1] * (n_ids - 6)
        labels = torch.tensor([[i if t else -100 for i, t in zip(ids, target)]])
        res = pm(torch.tensor([ids]), labels=labels)
        res.loss.backward()
        grads = []
        layers = pm.base_model.model.model.layers
        for layer in layers:
            for blk, proj in SLOTS:
                mod = getattr(getattr(layer, blk), proj)
                grads.append(mod.lora_A["default"].weight.grad.reshape(-1))
                grads.append(mod.lora_B["default"].weight.grad.reshape(-1))
        torch.cat(grads).to(torch.float32).numpy().tofile(d + ".grads.f32")
        json.dump(dict(ids=ids, target=target, rank=4, loss=float(res.loss.detach()), torch=torch.__version__,
                       transformers=transformers.__version__), open(d + ".train.json", "w"))
        print(f"{c['name']}: loss {float(res.loss.detach()):.6f}, {len(layers)} layers, "
              f"|grad| {float(torch.cat(grads).norm()):.4g}")


if __name__ == "__main__":
    main()
