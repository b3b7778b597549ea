#!/usr/bin/env bash
# helix-bg embed end to end on the shared tiny BERT: the embeddings of the
# reference texts agree with transformers' (cosine > 0.9999), --format f32 gives
# the same numbers raw, and bad input is a clear error.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
SHARED=${HX_SHARED:-../shared}
M="$SHARED/models/ref-tiny/tiny-bert-shared.gguf"
R="$SHARED/refs/tiny-bert-shared.embeddings.json"
[ -f "$M" ] && [ -f "$R" ] || { echo "SKIP: $M or $R not found"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# one text per line: texts with line breaks (covered by test_bert) are left out here
python3 -c 'import json,sys; [print(x["text"]) for x in json.load(open(sys.argv[1])) if "\n" not in x["text"] and "\r" not in x["text"]]' "$R" > "$tmp/texts.txt"
"$BIN" embed -m "$M" < "$tmp/texts.txt" > "$tmp/out.jsonl"
"$BIN" embed -m "$M" --format f32 < "$tmp/texts.txt" > "$tmp/out.f32"
python3 - "$R" "$tmp/out.jsonl" "$tmp/out.f32" <<'PY'
import json, struct, sys
ref = [x for x in json.load(open(sys.argv[1])) if "\n" not in x["text"] and "\r" not in x["text"]]
ours = [json.loads(l) for l in open(sys.argv[2])]
raw = open(sys.argv[3], 'rb').read()
dim = len(ref[0]["embedding"])
assert len(ours) == len(ref) and len(raw) == 4 * dim * len(ref), (len(ours), len(raw))
worst = 1.0
for i, (r, o) in enumerate(zip(ref, ours)):
    c = sum(a * b for a, b in zip(r["embedding"], o))
    worst = min(worst, c)
    f = struct.unpack_from('<%df' % dim, raw, 4 * dim * i)
    assert max(abs(a - b) for a, b in zip(f, o)) < 1e-6, i
print("worst cosine", worst)
assert worst > 0.9999
PY
fail=0
if "$BIN" embed -m /nonexistent.gguf < /dev/null 2>"$tmp/err"; then echo "FAIL: missing model accepted"; fail=1; fi
grep -q nonexistent "$tmp/err" || { echo "FAIL: error does not name the file"; fail=1; }
if "$BIN" embed -m "$SHARED/models/stories260K.gguf" < /dev/null 2>"$tmp/err"; then echo "FAIL: decoder accepted"; fail=1; fi
grep -qi "not a BERT" "$tmp/err" || { echo "FAIL: unclear error for a decoder"; cat "$tmp/err"; fail=1; }
[ $fail = 0 ] && echo "1 passed, 0 failed"
exit $fail
