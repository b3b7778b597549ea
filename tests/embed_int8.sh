#!/usr/bin/env bash
# helix-bg embed --embed-type int8 against f32 on the real all-MiniLM-L6-v2
# (HX_MINILM, default ~/.cache/helix/all-MiniLM-L6-v2; README says how to get it):
# the worst cosine over 300 varied sentences (bench/make_sentences.py) is >= 0.999
# (the issue's bar), int8 is not f32 in disguise (some cosine < 0.99999), batch 1
# gives batch 32's bits, and the AVX2 level (HX_ISA=avx2) the AVX512-VNNI level's
# bits. Skips when the model is absent.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
M=${HX_MINILM:-$HOME/.cache/helix/all-MiniLM-L6-v2}
[ -f "$M/config.json" ] || [ -f "$M" ] || { echo "SKIP: $M absent (README: the real all-MiniLM-L6-v2)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 bench/make_sentences.py 300 > "$tmp/s.txt"
head -n 40 "$tmp/s.txt" > "$tmp/s40.txt"
emb() { "$BIN" embed -m "$M" -t 2 --format f32 "$@" 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }; }
emb --embed-type f32 --batch 32 < "$tmp/s.txt" > "$tmp/f32.bin"
emb --embed-type int8 --batch 32 < "$tmp/s.txt" > "$tmp/i8.bin"
grep -q 'cpu int8' "$tmp/err" || { echo "embed did not report int8: $(cat "$tmp/err")"; exit 1; }
emb --embed-type int8 --batch 1 < "$tmp/s40.txt" > "$tmp/i8b1.bin"
cmp <(head -c "$(stat -c %s "$tmp/i8b1.bin")" "$tmp/i8.bin") "$tmp/i8b1.bin" ||
    { echo "int8: batch 1 differs from batch 32"; exit 1; }
if grep -q avx512_vnni /proc/cpuinfo; then
    HX_ISA=avx2 emb --embed-type int8 --batch 32 < "$tmp/s40.txt" > "$tmp/i8avx2.bin"
    emb --embed-type int8 --batch 32 < "$tmp/s40.txt" > "$tmp/i8vnni.bin"
    cmp "$tmp/i8avx2.bin" "$tmp/i8vnni.bin" || { echo "int8: the AVX2 level differs from AVX512-VNNI"; exit 1; }
fi
python3 - "$tmp/f32.bin" "$tmp/i8.bin" <<'PY'
import array, math, sys
a, b = array.array('f'), array.array('f')
a.frombytes(open(sys.argv[1], 'rb').read()); b.frombytes(open(sys.argv[2], 'rb').read())
dim = 384
assert len(a) == len(b) == 300 * dim, (len(a), len(b))
cos = []
for i in range(300):
    x, y = a[i * dim:(i + 1) * dim], b[i * dim:(i + 1) * dim]
    cos.append(sum(p * q for p, q in zip(x, y)) / math.sqrt(sum(p * p for p in x) * sum(q * q for q in y)))
cos.sort()
print("int8 vs f32 over 300 sentences: worst cosine %.6f, median %.6f" % (cos[0], cos[150]))
assert cos[0] >= 0.999, cos[:5]
assert cos[0] < 0.99999, "int8 gives f32's vectors: is it running?"
PY
# a KB embedded in int8: search with the same --embed-model embeds the query the same way
mkdir -p "$tmp/kb"
cp examples/kb/data.log "$tmp/kb/"
"$BIN" one-shot "$tmp/kb" --embed-model "$M" --embed-type int8 -q -t 2 2>/dev/null
"$BIN" search "$tmp/kb" "leaky kitchen tap" --embed-model "$M" -k 1 > "$tmp/search.txt" ||
    { echo "search on an int8 KB failed"; exit 1; }
grep -q "home-repair" "$tmp/search.txt" || { echo "search on an int8 KB: unexpected answer"; cat "$tmp/search.txt"; exit 1; }
echo "2 passed, 0 failed"
