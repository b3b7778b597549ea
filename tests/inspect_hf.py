#!/usr/bin/env python3
"""inspect_hf.py OUT_DIR SHARED_DIR HELIX_BG — helix-bg inspect's attention probabilities
against transformers' output_attentions (attn_implementation="eager", float64) on the tiny
random llama / qwen2 / qwen3 / gemma3 folders tests/hf_make_tiny.py builds (gemma3: two
sliding-window layers of window 4 and a global one). For each folder: a 24-token prompt of
random ids (BOS first where the family uses one), every layer and head; the largest absolute
difference must stay under 1e-5, and entries transformers masks must be 0 in helix too.
Where peft is installed, the same again through a random PEFT LoRA adapter (r 4 on the 7
projections and embed_tokens, lm_head too where the head is untied): `helix-bg inspect
--lora FOLDER` against PeftModel's output_attentions in float64, and the adapted attention
must differ from the base's by far more than that.
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch
import transformers

TOL = 1e-5


def main():
    out, shared, helix = sys.argv[1], sys.argv[2], sys.argv[3]
    transformers.logging.disable_progress_bar()
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, os.path.join(here, "hf_make_tiny.py"), out, shared],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        print("FAIL: hf_make_tiny.py failed")
        return 1
    try:
        import peft
    except ImportError:
        peft = None
        print("peft is not installed: the adapter cases are skipped")
    fails = 0
    runs = [(n, False) for n in ("llama", "qwen2", "qwen3", "gemma3")]
    if peft:
        runs += [(n, True) for n in ("llama", "qwen2", "qwen3", "gemma3")]
    base_probs = {}
    for name, lora in runs:
        d = os.path.join(out, name)
        model = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager")
        cfg = model.config
        extra = []
        if lora:  # a random adapter, saved and loaded back as helix will read it
            targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "embed_tokens"]
            if not getattr(cfg, "tie_word_embeddings", False):
                targets.append("lm_head")
            pm = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets,
                                                            init_lora_weights=False))
            g = torch.Generator().manual_seed(21)
            with torch.no_grad():
                for n, p in pm.named_parameters():
                    if "lora_" in n:
                        p.copy_(0.2 * torch.randn(p.shape, generator=g))
            ad = d + ".inspect-lora"
            pm.save_pretrained(ad)
            base = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager")
            model = peft.PeftModel.from_pretrained(base, ad)
            extra = ["--lora", ad]
        model = model.to(torch.float64).eval()
        g = torch.Generator().manual_seed(11)
        ids = torch.randint(0, min(cfg.vocab_size, 30000), (23,), generator=g).tolist()
        if name in ("llama", "gemma3"):
            ids = [cfg.bos_token_id] + ids
        with torch.no_grad():
            res = model(torch.tensor([ids]), output_attentions=True)
        ref = np.stack([a[0].numpy() for a in res.attentions])  # (layers, heads, T, T)
        probs_file = os.path.join(out, name + (".lora" if lora else "") + ".probs.f32")
        r = subprocess.run([helix, "inspect", "-m", d, "--prompt-ids", ",".join(map(str, ids)), "--json",
                            "--probs", probs_file] + extra, capture_output=True, text=True)
        name = name + (" +PEFT LoRA" if lora else "")
        if r.returncode != 0:
            print(f"FAIL {name}: helix-bg inspect exited {r.returncode}: {r.stderr.strip()}")
            fails += 1
            continue
        meta = json.loads(r.stdout)
        T = len(ids)
        got = np.fromfile(probs_file, dtype="<f4")
        shape = (meta["n_layer"], meta["n_head"], T, T)
        if meta["n_tok"] != T or got.size != np.prod(shape) or shape != ref.shape:
            print(f"FAIL {name}: helix shape {shape} ({got.size} values), transformers {ref.shape}")
            fails += 1
            continue
        got = got.reshape(shape).astype(np.float64)
        diff = np.abs(got - ref)
        masked = ref == 0
        swa = [w for w in meta["window"] if w]
        worst = np.unravel_index(np.argmax(diff), diff.shape)
        print(f"{name}: {shape[0]} layers x {shape[1]} heads x {T} tokens, windows {meta['window']}: "
              f"max |helix - transformers| {diff.max():.3g} at (layer, head, query, key) {tuple(int(x) for x in worst)}; "
              f"{int(masked.sum())} masked entries, helix's largest there {got[masked].max() if masked.any() else 0:.3g}")
        if lora:
            moved = np.abs(got - base_probs[name.split()[0]]).max()
            print(f"{name}: max |adapted - base| {moved:.3g}")
            if not moved > 100 * max(diff.max(), 1e-7):
                print(f"FAIL {name}: the adapter moves the probabilities by only {moved:.3g}")
                fails += 1
        else:
            base_probs[name] = got
        if name == "gemma3" and not (swa and min(swa) < T):
            print(f"FAIL {name}: no sliding-window layer shorter than the prompt (windows {meta['window']})")
            fails += 1
        if not diff.max() < TOL:
            print(f"FAIL {name}: max abs difference {diff.max():.3g} >= {TOL}")
            fails += 1
    print("inspect_hf: " + ("all within %g" % TOL if not fails else "%d failures" % fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
