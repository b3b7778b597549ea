#!/usr/bin/env bash
# The knowledge-base benchmark: generate N entries (default 100000) across 12
# topics and time one-shot passes with the built-in embedder:
#   cold        nothing cached: embed all, compare all pairs
#   warm        nothing new: incremental pass with nothing to compare
#   warm-full   --full: cache reused, all pairs compared again
#   +100        100 entries appended: incremental (100 x N pairs)
#   +10000      10,000 more appended: incremental (10,000 x N pairs)
# Each line: seconds (total, embedding, pairs), peak RSS; with --json one JSON
# object per pass as well (for bench/results.jsonl).
#   bash bench/kb_bench.sh [N] [THREADS] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}; T=${2:-$(nproc)}; JSON=${3:-}
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gen() { # gen COUNT SEED >> data.log
  python3 - "$1" "$2" <<'PY'
import json, random, sys
n, seed = int(sys.argv[1]), int(sys.argv[2]); r = random.Random(seed)
vocab = [w.strip() for w in open("examples/kb/data.log").read().replace('"', ' ').replace(',', ' ').split() if w.isalpha()]
topics = ["t%02d" % i for i in range(12)]
for i in range(n):
    words = [r.choice(vocab) for _ in range(r.randint(10, 60))]
    print(json.dumps({"topic": r.choice(topics), "title": " ".join(words[:4]), "text": " ".join(words)}))
PY
}
run() { # run NAME [flags]
  local name=$1; shift
  /usr/bin/time -v "$BIN" one-shot "$tmp" -t "$T" "$@" > "$tmp/out.txt" 2> "$tmp/time.txt"
  local line rss
  line=$(tail -1 "$tmp/out.txt"); rss=$(grep "Maximum resident" "$tmp/time.txt" | grep -o '[0-9]*$')
  python3 - "$name" "$line" "$rss" "$N" "$T" "$JSON" <<'PY'
import json, re, subprocess, sys
name, line, rss, n, t, js = sys.argv[1:7]
m = re.search(r"^(\d+) entries .*?(\d+) embedded now .*?, ([\d.]+) s \(embedding ([\d.]+) s, (incremental pairs|all-pairs) ([\d.]+) s\)", line)
live, emb, total, te, kind, tp = m.groups()
print("%-10s %7s entries %6s embedded  total %7s s  embedding %6s s  %-17s %7s s  peak RSS %4d MiB"
      % (name, live, emb, total, te, kind, tp, int(rss) // 1024))
if js == "--json":
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"bench": "kb", "pass": name, "entries": int(live), "embedded": int(emb), "threads": int(t),
                      "seconds": float(total), "embed_seconds": float(te), "pairs": kind, "pairs_seconds": float(tp),
                      "peak_rss_mib": int(rss) // 1024, "commit": commit}))
PY
}
gen "$N" 11 > "$tmp/data.log"
run cold
run warm
run warm-full --full
gen 100 12 >> "$tmp/data.log"; run +100
gen 10000 13 >> "$tmp/data.log"; run +10000
