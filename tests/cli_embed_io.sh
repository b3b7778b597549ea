#!/usr/bin/env bash
# helix-bg embed's input and output paths on the shared tiny BERT: 5000 lines (empty ones, a last
# line without a newline) give 5000 rows in order; the JSON lines (formatted on several threads, in
# windows of 4096 rows) are exactly "%.7g" of the --format f32 floats; f32 is n x dim floats.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
SHARED=${HX_SHARED:-../shared}
M="$SHARED/models/ref-tiny/tiny-bert-shared.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/in.txt" <<'PY'
import random, sys
r = random.Random(7)
words = ["cache", "log", "the", "gpu", "Zürich", "naïve", "42", "?", "kernel", "batch"]
lines = ["" if r.random() < 0.05 else " ".join(r.choice(words) for _ in range(r.randint(1, 40))) for _ in range(5000)]
open(sys.argv[1], "w").write("\n".join(lines))  # no newline after the last line
PY
"$BIN" embed -m "$M" -t 2 < "$tmp/in.txt" > "$tmp/out.jsonl"
"$BIN" embed -m "$M" -t 2 --format f32 < "$tmp/in.txt" > "$tmp/out.f32"
head -n 7 "$tmp/in.txt" | "$BIN" embed -m "$M" --format f32 > "$tmp/head.f32"
python3 - "$tmp" <<'PY'
import array, sys
tmp = sys.argv[1]
js = open(f"{tmp}/out.jsonl").read().split("\n")
assert js[-1] == "" and len(js) == 5001, len(js)
a = array.array("f"); a.frombytes(open(f"{tmp}/out.f32", "rb").read())
dim = len(a) // 5000
assert dim * 5000 == len(a) and dim > 0, len(a)
for i in range(5000):
    want = "[" + ", ".join("%.7g" % x for x in a[i * dim:(i + 1) * dim]) + "]"
    assert js[i] == want, (i, js[i][:80], want[:80])
h = open(f"{tmp}/head.f32", "rb").read()
assert h == a[:7 * dim].tobytes(), "the first 7 lines alone differ from the same lines among 5000"
print("5000 rows, dim %d: JSON = %%.7g of f32, the first 7 alone the same bits: 1 passed, 0 failed" % dim)
PY
