#!/usr/bin/env python3
"""kb_llm_peer.py — the KB's LLM stages sent to llama-server as people do it
today: every note's classification prompt as one /completion request whose
answer is constrained by a json_schema enum of the topics, and every summary
prompt as a plain greedy /completion, C requests in flight at once. The
prompts are the ones helix runs (bench/kb_llm_bench --dump FILE: the chat
template already applied), so both engines read the same tokens.
Standard library only (urllib + threads).

For each stage it prints one JSON line on stdout: entries, seconds,
entries_per_s, prompt tokens (the server's count, and how many it processed
after its prompt-cache reuse), generated tokens and tokens/s, and for the
classification the accuracy against each note's topic and the answers that
were not one of the topics (none expected: the grammar forbids them).

usage: kb_llm_peer.py --port P --prompts FILE [--host 127.0.0.1] [--concurrency 32]
                      [--stages classify,summaries] [--warmup 32]
"""
import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def post(url, body, timeout=3600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"HTTP {e.code} from {url}: {e.read()[:300]!r}") from None


def load(path):
    try:
        with open(path) as f:
            head = json.loads(f.readline())
            notes = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        sys.exit(f"kb_llm_peer: --prompts {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"kb_llm_peer: --prompts {path}: not JSON lines ({e})")
    if "labels" not in head or not notes:
        sys.exit(f"kb_llm_peer: --prompts {path}: no labels line or no notes (write it with kb_llm_bench --dump)")
    return head, notes


def run(url, bodies, conc):
    """Send every body, conc at a time; the answers in order and the wall time."""
    out = [None] * len(bodies)
    err = []
    lock = threading.Lock()

    def one(i):
        try:
            out[i] = post(url, bodies[i])
        except Exception as e:  # noqa: BLE001 -- reported after the run
            with lock:
                err.append(f"request {i}: {e}")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=conc) as ex:
        list(ex.map(one, range(len(bodies))))
    dt = time.perf_counter() - t0
    if err:
        sys.exit("kb_llm_peer: " + "; ".join(err[:3]) + (f" (and {len(err) - 3} more)" if len(err) > 3 else ""))
    return out, dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prompts", required=True, help="kb_llm_bench --dump FILE")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--stages", default="classify,summaries")
    ap.add_argument("--warmup", type=int, default=32, help="unrecorded requests first (8 tokens each)")
    a = ap.parse_args()
    stages = a.stages.split(",")
    for s in stages:
        if s not in ("classify", "summaries"):
            sys.exit(f"kb_llm_peer: --stages: unknown stage '{s}' (classify, summaries)")
    if a.concurrency < 1:
        sys.exit("kb_llm_peer: --concurrency must be >= 1")
    head, notes = load(a.prompts)
    labels, max_tokens = head["labels"], head.get("max_tokens", 40)
    url = f"http://{a.host}:{a.port}/completion"
    # the classification answer is the label as a JSON string: its longest
    # tokenization plus two quotes fits in 32 tokens for any topic name here
    schema = {"type": "string", "enum": labels}
    if a.warmup > 0:
        # text no note shares, so no slot starts the timed run holding a note's prompt
        run(url, [{"prompt": f"Warm-up request {i}: count to ten.", "n_predict": 8, "temperature": 0}
                  for i in range(a.warmup)], a.concurrency)

    if "classify" in stages:
        bodies = [{"prompt": n["classify"], "n_predict": 32, "temperature": 0, "json_schema": schema} for n in notes]
        res, dt = run(url, bodies, a.concurrency)
        right = bad = 0
        for n, r in zip(notes, res):
            try:
                ans = json.loads(r["content"])
            except (json.JSONDecodeError, KeyError, TypeError):
                ans = None
            if ans not in labels:
                bad += 1
            elif labels.index(ans) == n["topic"]:
                right += 1
        ptok = sum(r.get("tokens_evaluated", 0) for r in res)
        pproc = sum(r.get("timings", {}).get("prompt_n", 0) for r in res)
        gtok = sum(r.get("tokens_predicted", 0) for r in res)
        print(json.dumps({"test": "kb-classify", "entries": len(notes), "seconds": round(dt, 3),
                          "entries_per_s": round(len(notes) / dt, 2), "prompt_tokens": ptok,
                          "prompt_tokens_processed": pproc, "prompt_tokens_per_s": round(ptok / dt, 1),
                          "generated_tokens": gtok, "accuracy": round(right / len(notes), 4), "invalid": bad,
                          "concurrency": a.concurrency}), flush=True)

    if "summaries" in stages:
        summ = [n for n in notes if "summary" in n]
        if not summ:
            sys.exit("kb_llm_peer: the prompts file has no summary prompts (kb_llm_bench --summaries 0?)")
        bodies = [{"prompt": n["summary"], "n_predict": max_tokens, "temperature": 0} for n in summ]
        res, dt = run(url, bodies, a.concurrency)
        gtok = sum(r.get("tokens_predicted", 0) for r in res)
        ptok = sum(r.get("tokens_evaluated", 0) for r in res)
        print(json.dumps({"test": "kb-summaries", "entries": len(summ), "seconds": round(dt, 3),
                          "entries_per_s": round(len(summ) / dt, 2), "max_tokens": max_tokens,
                          "generated_tokens": gtok, "generated_tokens_per_s": round(gtok / dt, 1),
                          "prompt_tokens": ptok, "concurrency": a.concurrency}), flush=True)


if __name__ == "__main__":
    main()
