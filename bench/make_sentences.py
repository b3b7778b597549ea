#!/usr/bin/env python3
"""Deterministic, varied English sentences of 10-60 words for embedding tests and
benchmarks (technical prose, questions, numbers, punctuation, accents, casing).
  python3 bench/make_sentences.py 1000 > sentences.txt"""
import random
import sys

SUBJ = ["The scheduler", "Our cache layer", "A junior engineer", "The database replica", "Each worker thread",
        "The GPU kernel", "This tokenizer", "The release manager", "A failing test", "The load balancer",
        "Café owners in Zürich", "The naïve implementation", "Half of the cluster", "The on-call SRE", "Version 2.3.1"]
VERB = ["rejects", "retries", "compresses", "flushes", "rebuilds", "logs", "indexes", "throttles", "migrates",
        "serializes", "validates", "quantizes", "prefetches", "shards", "summarizes"]
OBJ = ["every incoming request", "the write-ahead log", "stale embeddings", "the nightly backup", "user sessions",
       "4096 tokens per batch", "the 99th-percentile latency", "corrupted pages", "the config file",
       "expired TLS certificates", "a 10 MB JSON line", "the KV cache", "duplicate entries", "old snapshots"]
TAIL = ["before the deadline", "after a kill -9", "when memory runs low", "under heavy load", "on every restart",
        "without losing data", "in under a minute", "as the docs describe", "for the third time today",
        "because nobody noticed", "while the daemon sleeps", "(see issue #42)", "— or so we hoped", "at 3 a.m."]
Q = ["Why does", "How often does", "When exactly does", "Should we check whether"]


def sentence(r):
    parts = []
    target = r.randint(10, 60)
    while sum(len(p.split()) for p in parts) < target:
        if r.random() < 0.2:
            parts.append(f"{r.choice(Q)} {r.choice(SUBJ).lower()} {r.choice(VERB)[:-1]} {r.choice(OBJ)}?")
        else:
            parts.append(f"{r.choice(SUBJ)} {r.choice(VERB)} {r.choice(OBJ)} {r.choice(TAIL)}.")
    words = " ".join(parts).split()[:target]
    s = " ".join(words)
    if r.random() < 0.1:
        s = s.upper()
    return s


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    r = random.Random(1234)
    for _ in range(n):
        print(sentence(r))


if __name__ == "__main__":
    main()
