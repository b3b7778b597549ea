#!/usr/bin/env bash
# The think stage after an incremental pass gives what a run from scratch
# gives (src/kb/think.c, classify.c). Appending entries changes every TF-IDF
# weight (the IDF's n) and moves centroids, so no earlier classification may
# be reused: the stage recomputes from the words each pass. Here the appended
# notes pull "cooking"'s centroid towards databases and add new words, a
# delete retires an entry; then insights.json after the incremental pass
# (2 threads) must equal, byte for byte, a from-scratch --full one-shot of the
# same data.log (1 thread), and earlier entries' probabilities must have moved
# (else the test would not tell a stale reuse from a recomputation).
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/inc" "$tmp/scratch"
cp examples/kb/data.log "$tmp/inc/data.log"
# (examples/kb ends in a line cut short on purpose: its warning is expected)
"$BIN" one-shot "$tmp/inc" -t 2 -q > /dev/null 2>&1
cp "$tmp/inc/insights.json" "$tmp/before.json"
python3 - "$tmp/inc/data.log" <<'PY'
import json, sys
p = sys.argv[1]
first = open(p, "rb").readline()
with open(p, "a") as f:
    for i in range(12):
        f.write(json.dumps({"topic": "cooking", "title": "Postgres vacuum and index notes %d" % i,
                            "text": "postgres autovacuum index orders table replica lag query plan pgbouncer "
                                    "connection pool zyxwvut%d quorble" % i}) + "\n")
    f.write(json.dumps({"delete": 0}) + "\n")   # the first entry retired
    f.write(json.dumps({"topic": "garden", "title": "Brand new words",
                        "text": "frobnicated quorble zyxwvut0 tomatoes compost"}) + "\n")
PY
"$BIN" one-shot "$tmp/inc" -t 2 > "$tmp/inc.out" 2> "$tmp/inc.err" || { cat "$tmp/inc.err"; exit 1; }
grep -q "13 embedded now .*incremental pairs" "$tmp/inc.out" || { echo "FAIL: the second pass was not incremental"; cat "$tmp/inc.out"; exit 1; }
cp "$tmp/inc/data.log" "$tmp/scratch/data.log"
"$BIN" one-shot "$tmp/scratch" -t 1 --full -q > /dev/null 2>&1
if ! cmp -s "$tmp/inc/insights.json" "$tmp/scratch/insights.json"; then
  echo "FAIL: insights.json after the incremental pass differs from a run from scratch"
  diff <(python3 -m json.tool "$tmp/inc/insights.json") <(python3 -m json.tool "$tmp/scratch/insights.json") | head -40
  exit 1
fi
python3 - "$tmp/before.json" "$tmp/inc/insights.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ca = {c["id"]: c for c in a["classifications"]}
cb = {c["id"]: c for c in b["classifications"]}
assert 0 in ca and 0 not in cb, "the deleted entry is still classified"
assert len(cb) == len(ca) - 1 + 13, (len(ca), len(cb))
moved = sum(1 for i in ca if i in cb and ca[i]["probability"] != cb[i]["probability"])
flipped = sum(1 for i in ca if i in cb and ca[i]["predicted"] != cb[i]["predicted"])
assert moved > len(cb) // 2, "only %d of %d earlier entries' probabilities moved" % (moved, len(cb))
print("ok: %d entries; the append moved %d earlier probabilities and %d predictions; incremental == scratch"
      % (len(cb), moved, flipped))
PY
