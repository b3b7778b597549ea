#!/usr/bin/env bash
# embeddings.add, the cache's appended records (src/kb/kb.c): a pass that only
# appends entries writes their vectors beside embeddings.bin instead of
# rewriting it, and every later pass reads the two as one cache. Checked:
# after each append the report equals a full pass on a fresh copy of data.log
# byte for byte, with nothing embedded twice; a damaged, foreign, stale or
# linked embeddings.add is ignored with a warning (its entries embedded again,
# a link's target untouched) and the report is still right; once the
# appended records pass a quarter of the base, the base is rewritten whole
# and embeddings.add removed.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gen() { # gen COUNT SEED
  python3 - "$1" "$2" <<'PY'
import json, random, sys
n, seed = int(sys.argv[1]), int(sys.argv[2]); r = random.Random(seed)
vocab = [w.strip() for w in open("examples/kb/data.log").read().replace('"', ' ').replace(',', ' ').split() if w.isalpha()]
for i in range(n):
    words = [r.choice(vocab) for _ in range(r.randint(8, 40))]
    topic = "s%d_%d" % (seed, i) if i % 9 == 4 else "t%02d" % r.randrange(8)
    print(json.dumps({"topic": topic, "title": " ".join(words[:4]), "text": " ".join(words)}))
PY
}
kb=$tmp/kb
mkdir "$kb" "$tmp/ref"
check() { # check NAME EMBEDDED: one-shot on kb equals --full on a copy; EMBEDDED entries embedded
  "$BIN" one-shot "$kb" --no-think > "$tmp/out" 2> "$tmp/err"
  cp "$kb/data.log" "$tmp/ref/data.log"; rm -f "$tmp/ref/embeddings."* "$tmp/ref/insights."*
  "$BIN" one-shot "$tmp/ref" --no-think --full > /dev/null 2>&1
  cmp "$kb/insights.json" "$tmp/ref/insights.json" || { echo "FAIL: $1: report differs from a full pass"; cat "$tmp/err"; exit 1; }
  got=$(grep -o '[0-9]* embedded now' "$tmp/out" | grep -o '^[0-9]*')
  [ "$got" = "$2" ] || { echo "FAIL: $1: $got embedded, expected $2"; cat "$tmp/out" "$tmp/err"; exit 1; }
  echo "$1: report equals a full pass, $got embedded$( [ -e "$kb/embeddings.add" ] && echo ", embeddings.add $(stat -c %s "$kb/embeddings.add") bytes")"
}
gen 2000 1 > "$kb/data.log"
check "2000 entries" 2000
[ ! -e "$kb/embeddings.add" ] || { echo "FAIL: a full pass left embeddings.add"; exit 1; }
base=$(stat -c %Y.%s "$kb/embeddings.bin")
gen 50 2 >> "$kb/data.log"; check "+50" 50
[ -f "$kb/embeddings.add" ] || { echo "FAIL: no embeddings.add after an append"; exit 1; }
[ "$(stat -c %Y.%s "$kb/embeddings.bin")" = "$base" ] || { echo "FAIL: embeddings.bin rewritten for an append"; exit 1; }
gen 50 3 >> "$kb/data.log"; check "+50 more (read with the first 50)" 50

# damaged: one byte of a vector flipped -> ignored, the 100 embedded again
python3 - "$kb/embeddings.add" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x40; open(p, "wb").write(bytes(b))
PY
gen 10 4 >> "$kb/data.log"; check "damaged embeddings.add" 110
grep -q "embeddings.add: checksum mismatch; ignoring it" "$tmp/err" || { echo "FAIL: no warning for a damaged embeddings.add"; cat "$tmp/err"; exit 1; }

[ ! -e "$kb/embeddings.add" ] || { echo "FAIL: the damaged embeddings.add was kept"; exit 1; }

# stale: an embeddings.add written for another base -> ignored
gen 10 5 >> "$kb/data.log"; check "+10" 10
cp "$kb/embeddings.add" "$tmp/stale.add"
echo '{"delete": 0}' >> "$kb/data.log"; check "a delete (rewrites the base)" 0
[ ! -e "$kb/embeddings.add" ] || { echo "FAIL: a rewritten base left embeddings.add"; exit 1; }
cp "$tmp/stale.add" "$kb/embeddings.add"
gen 10 6 >> "$kb/data.log"; check "stale embeddings.add" 10
grep -q "embeddings.add: written for another base cache; ignoring it" "$tmp/err" || { echo "FAIL: no warning for a stale embeddings.add"; cat "$tmp/err"; exit 1; }

# a link: refused when read, replaced (not followed) when written
echo "precious" > "$tmp/victim"
rm -f "$kb/embeddings.add"; ln -s "$tmp/victim" "$kb/embeddings.add"
gen 10 7 >> "$kb/data.log"; check "embeddings.add a link (the 10 it held embedded again)" 20
[ "$(cat "$tmp/victim")" = "precious" ] || { echo "FAIL: the link's target was written"; exit 1; }
[ ! -L "$kb/embeddings.add" ] || { echo "FAIL: embeddings.add is still a link"; exit 1; }

# past a quarter of the base: one rewrite, embeddings.add gone
gen 700 8 >> "$kb/data.log"; check "+700 (past a quarter)" 700
[ ! -e "$kb/embeddings.add" ] || { echo "FAIL: embeddings.add kept past a quarter of the base"; exit 1; }
gen 20 9 >> "$kb/data.log"; check "+20 on the new base" 20
echo ok
