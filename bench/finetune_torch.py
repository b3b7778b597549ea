#!/usr/bin/env python3
"""finetune_torch.py GGUF TOKENS.jsonl [options] — the PyTorch + PEFT side of bench/RESULTS.md's
fine-tuning comparison: LoRA training on the same model and the same tokens as `helix-bg finetune`.

GGUF: the model helix trains (transformers dequantizes it to f32 through the gguf package).
TOKENS.jsonl: `helix-bg finetune --save-tokens` output, one {"ids": [...], "target": [0/1...]} per
example, so both frameworks see identical token ids and completion masks.

Each step takes --batch examples in file order, right-padded into one batch (the padding is masked and
not counted), loss = mean cross-entropy of the target tokens, AdamW (weight decay 0.01), clipping at 1,
LoRA r / alpha on q, k, v, o, gate, up, down (dropout 0). Prints a line per step and a summary with
tokens/s (wall and per CPU second of the process) over the steps after the first (warm-up); --threads sets torch's intra-op threads.
"""
import argparse
import json
import os
import time

import torch
import transformers
from peft import LoraConfig, get_peft_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("tokens")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    ex = [json.loads(line) for line in open(args.tokens) if line.strip()]
    t0 = time.time()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(args.gguf)), gguf_file=os.path.basename(args.gguf), torch_dtype=torch.float32)
    pm = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0,
                                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                          "up_proj", "down_proj"]))
    pm.train()
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.01)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} threads, "
          f"load {time.time() - t0:.1f} s", flush=True)
    tok_timed, s_timed, cpu_timed = 0, 0.0, 0.0
    for step in range(args.steps):
        batch = [ex[(step * args.batch + i) % len(ex)] for i in range(args.batch)]
        n = max(len(b["ids"]) for b in batch)
        ids = torch.zeros((len(batch), n), dtype=torch.long)
        mask = torch.zeros((len(batch), n), dtype=torch.long)
        labels = torch.full((len(batch), n), -100, dtype=torch.long)
        for r, b in enumerate(batch):
            k = len(b["ids"])
            ids[r, :k] = torch.tensor(b["ids"])
            mask[r, :k] = 1
            labels[r, :k] = torch.tensor([i if t else -100 for i, t in zip(b["ids"], b["target"])])
        real = int(mask.sum())
        ts, cs = time.time(), time.process_time()
        out = pm(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        gn = torch.nn.utils.clip_grad_norm_([p for p in pm.parameters() if p.requires_grad], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt, dc = time.time() - ts, time.process_time() - cs
        if step > 0:
            tok_timed += real
            s_timed += dt
            cpu_timed += dc
        print(f"step {step + 1}/{args.steps}  loss {float(out.loss.detach()):.4f}  |g| {float(gn):.3g}  {real} tok  "
              f"{real / dt:.0f} tok/s  {dt:.1f} s", flush=True)
    if s_timed > 0:
        print(json.dumps(dict(framework="pytorch+peft", threads=args.threads, steps_timed=args.steps - 1,
                              tokens=tok_timed, seconds=round(s_timed, 2), tokens_per_s=round(tok_timed / s_timed, 1),
                              cpu_seconds=round(cpu_timed, 2), tokens_per_cpu_s=round(tok_timed / cpu_timed, 1))))


if __name__ == "__main__":
    main()
