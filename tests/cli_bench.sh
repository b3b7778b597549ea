#!/usr/bin/env bash
# helix-bg bench: runs on a real model, prints pp/tg rows and valid JSON; bad flags are clear errors.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
SHARED=${HX_SHARED:-../shared}
M="$SHARED/models/stories260K-Q8_0.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found"; exit 77; }
out=$("$BIN" bench -m "$M" -p 32 -n 8 -r 2 -t 2)
echo "$out"
grep -q "pp32" <<< "$out" && grep -q "tg8" <<< "$out"
"$BIN" bench -m "$M" -p 16 -n 4 -r 1 --json | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert [r["test"] for r in rows] == ["pp16", "tg4"], rows
assert all(r["tokens_per_s"] > 0 and r["mix"] == "q8_0" for r in rows), rows'
# --jsonl: exactly the keys of bench/results.jsonl
"$BIN" bench -m "$M" -p 16 -n 4 -r 1 -t 2 --jsonl | python3 -c '
import json, re, sys
rows = [json.loads(l) for l in sys.stdin]
keys = ["date", "commit", "device", "engine", "model", "mix", "test", "tokens_per_s"]
assert [list(r) for r in rows] == [keys, keys], rows
assert [r["test"] for r in rows] == ["pp16", "tg4"], rows
for r in rows:
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", r["date"]) and r["commit"] and r["engine"] == "helix", r
    assert r["model"] == "stories260K-Q8_0" and r["mix"] == "q8_0" and r["tokens_per_s"] > 0, r'
# --batch: llama-batched-bench's shape, a pp and a tg row per batch size
"$BIN" bench -m "$M" --batch 1,3 -r 1 -t 2 --json | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert [(r["test"], r["batch"]) for r in rows] == [("pp128-b1", 1), ("tg128-b1", 1), ("pp128-b3", 3), ("tg128-b3", 3)], rows
assert all(r["tokens_per_s"] > 0 for r in rows), rows'
fail=0
for args in "-p -1 -m $M" "-m /nonexistent.gguf" "--bogus" "-m $M --device tpu" "" "-m $M --batch 2,x" "-m $M --batch 0"; do
  if "$BIN" bench $args >/dev/null 2>/tmp/hx_bench_err.$$; then echo "FAIL: accepted: $args"; fail=1; fi
  [ -s /tmp/hx_bench_err.$$ ] || { echo "FAIL: no message for: $args"; fail=1; }
done
rm -f /tmp/hx_bench_err.$$
[ $fail = 0 ] && echo "1 passed, 0 failed"
exit $fail
