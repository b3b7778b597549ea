#!/usr/bin/env bash
# The 100k-entry knowledge-base benchmark: generate N entries (default 100000)
# across 12 topics, run one-shot with the built-in embedder (cold: everything
# embedded), then again (warm: cache reused, all-pairs only), and record entries/s
# for embedding, seconds for the all-pairs pass and peak RSS.
#   bash bench/kb_bench.sh [N] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}; T=${2:-$(nproc)}
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$N" > "$tmp/data.log" <<'PY'
import json, random, sys
n = int(sys.argv[1]); r = random.Random(11)
vocab = [w.strip() for w in open("examples/kb/data.log").read().replace('"', ' ').replace(',', ' ').split() if w.isalpha()]
topics = ["t%02d" % i for i in range(12)]
for i in range(n):
    words = [r.choice(vocab) for _ in range(r.randint(10, 60))]
    print(json.dumps({"topic": r.choice(topics), "title": " ".join(words[:4]), "text": " ".join(words)}))
PY
run() { /usr/bin/time -v "$BIN" one-shot "$tmp" -t "$T" 2> "$tmp/time.txt" | tail -1; grep "Maximum resident" "$tmp/time.txt"; }
echo "== cold (embed all $N)"; run
echo "== warm (cache reused)"; run
