#!/usr/bin/env python3
"""PyTorch fp32 BertModel throughput on sentences from stdin, the peer of
`helix-bg embed` in bench/bert_cpu_bench.sh.
  python bench/bert_torch_bench.py (--model HF_DIR | --tokenizer HF_DIR) [--batch 32] [--threads 2] [--repeat 3]
         [--device cuda [--fp16]] < sentences.txt
--model: a Hugging Face folder (real weights). --tokenizer: the all-MiniLM-L6-v2 shape (6 layers,
384, 12 heads, FFN 1536) with random weights and that folder's tokenizer (the same vocabulary
`helix-bg synth --preset minilm-l6 --tokenizer DIR/tokenizer.json` puts in its GGUF, so both
sides see the same tokens). Mean pooling + L2, sorted by length (minimal padding), batch B; the time
includes tokenization, as helix-bg embed's does. --device cuda: the model on the GPU (fp16 with --fp16),
the texts tokenized in one call (the fast tokenizer's batch path, on all cores), the timer stopped
after a device synchronize.
Prints 'torch: N sentences, K tokens, batch B, T threads, best X sent/s'."""
import argparse, sys, time
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--tokenizer")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fp16", action="store_true")
    a = ap.parse_args()
    gpu = a.device != "cpu"
    torch.set_num_threads(a.threads)
    texts = [l.rstrip("\n") for l in sys.stdin if l.strip()]
    tok = BertTokenizerFast.from_pretrained(a.model or a.tokenizer)
    if a.model:
        model = BertModel.from_pretrained(a.model, add_pooling_layer=False)
    else:
        cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                         intermediate_size=1536, max_position_embeddings=512)
        torch.manual_seed(0)
        model = BertModel(cfg, add_pooling_layer=False)
    model.eval()
    model.to(a.device, torch.float16 if a.fp16 else torch.float32)
    with torch.inference_mode():  # warm-up (thread pool, MKL/oneDNN init, CUDA kernels), not timed
        for L in (16, 64, 128):
            model(input_ids=torch.full((min(a.batch, 4), L), 1000, dtype=torch.long, device=a.device))
    if gpu:
        torch.cuda.synchronize()
    best = 0.0
    n_tok = 0
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        if gpu:
            enc = tok(texts, truncation=True, max_length=256)["input_ids"]
        else:
            enc = [tok(t, truncation=True, max_length=256)["input_ids"] for t in texts]
        n_tok = sum(len(e) for e in enc)
        order = sorted(range(len(texts)), key=lambda i: len(enc[i]))
        out = [None] * len(texts)
        with torch.inference_mode():
            for b in range(0, len(order), a.batch):
                idx = order[b:b + a.batch]
                L = max(len(enc[i]) for i in idx)
                ids = torch.zeros(len(idx), L, dtype=torch.long)
                mask = torch.zeros(len(idx), L, dtype=torch.long)
                for r, i in enumerate(idx):
                    ids[r, :len(enc[i])] = torch.tensor(enc[i])
                    mask[r, :len(enc[i])] = 1
                if gpu:
                    ids, mask = ids.to(a.device, non_blocking=True), mask.to(a.device, non_blocking=True)
                h = model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
                m = mask.unsqueeze(-1).float()
                v = (h * m).sum(1) / m.sum(1)
                v = torch.nn.functional.normalize(v, dim=1)
                for r, i in enumerate(idx):
                    out[i] = v[r]
        if gpu:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        best = max(best, len(texts) / dt)
    print(f"torch: {len(texts)} sentences, {n_tok} tokens, batch {a.batch}, {a.threads} threads, "
          f"{a.device}{' fp16' if a.fp16 else ''}, best {best:.1f} sent/s")


if __name__ == "__main__":
    main()
