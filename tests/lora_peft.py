#!/usr/bin/env python3
"""lora_peft.py OUT_DIR [SHARED_DIR] — PEFT LoRA adapters on tiny random Hugging Face decoders
and their float64 transformers+PEFT logits, for tests/lora_peft.sh (checked by test_lora).

For each case of hf_make_tiny.py (llama untied, qwen2 tied bf16, qwen3 tied f16, gemma3) it writes
  OUT_DIR/<name>/           the model folder (as hf_make_tiny.py makes it)
  OUT_DIR/<name>.lora/      a PEFT adapter (r 4, lora_alpha 8) on q/k/v/o/gate/up/down and
                            embed_tokens, plus lm_head where the output head is not tied (with a
                            tied head PEFT adapts the input embedding only: the head keeps the
                            base weight, as helix does; gemma3's delta is scaled with the
                            embedding, as llama.cpp adds it before its embedding scale)
  OUT_DIR/<name>.lora.json  {"ids": prompt ids, "n_vocab": V}
  OUT_DIR/<name>.lora.f32   float64 logits of every prompt position (n_ids x V), stored as f32
"""
import json
import os
import shutil
import sys

import torch
import transformers
from peft import LoraConfig, get_peft_model, PeftModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_make_tiny  # noqa: E402


def main():
    out = sys.argv[1]
    shared = sys.argv[2] if len(sys.argv) > 2 else "../shared"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(4321)
    for ci, c in enumerate(hf_make_tiny.cases()):
        d, cfg, vocab, g = hf_make_tiny.make_folder(c, 200 + ci, out, shared, shard=False)

        tied = bool(getattr(cfg, "tie_word_embeddings", False))
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "embed_tokens"]
        if not tied:
            targets += ["lm_head"]
        base = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager")
        pm = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False))
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_" in n:
                    p.copy_(0.15 * torch.randn(p.shape, generator=g))
        ad = d + ".lora"
        shutil.rmtree(ad, ignore_errors=True)
        pm.save_pretrained(ad)

        # the reference from the saved files, in float64
        base = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager")
        pm = PeftModel.from_pretrained(base, ad).to(torch.float64).eval()
        gi = torch.Generator().manual_seed(9)
        ids = torch.randint(0, min(vocab, 30000), (12,), generator=gi).tolist()
        with torch.no_grad():
            logits = pm(torch.tensor([ids])).logits[0]
        with pm.disable_adapter(), torch.no_grad():
            base_logits = pm(torch.tensor([ids])).logits[0]
        json.dump(dict(ids=ids, n_vocab=vocab, peft=__import__("peft").__version__, torch=torch.__version__,
                       transformers=transformers.__version__), open(d + ".lora.json", "w"))
        logits.to(torch.float32).numpy().tofile(d + ".lora.f32")
        print(f"{c['name']}: vocab {vocab}, targets {len(targets)}, max |lora - base| logit "
              f"{float((logits - base_logits).abs().max()):.3g}")


if __name__ == "__main__":
    main()
