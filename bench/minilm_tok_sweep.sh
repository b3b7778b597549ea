#!/usr/bin/env bash
# helix's WordPiece vs HF tokenizers (the tokenizer sentence-transformers runs) for all-MiniLM-L6-v2:
#   1. every Unicode scalar value c (line "x<c>x <c>"; line breaks and surrogates left out): is c dropped,
#      whitespace, split off as punctuation/CJK, accent-stripped, lowercased, or kept in its word;
#   2. N random lines mixing words with characters from many scripts and blocks (seeded).
#   bash bench/minilm_tok_sweep.sh [N]     (N default 20000)
# Prints the mismatch counts and, for the code points, their Unicode categories (as Python's unicodedata
# sees them) and whether each was already assigned in Unicode 3.2. HF's character tables are of an older
# Unicode version than utf8proc's, so characters assigned or recategorised since then differ; exits 1 only
# on a difference no such character explains (assigned in Unicode 3.2 with the same category as today).
# HX_MODEL_CACHE, PYTHON, HX_BIN as in bench/minilm_st_compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
DIR=${HX_MODEL_CACHE:-$HOME/.cache/helix}/all-MiniLM-L6-v2
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x /work/venv/bin/python ]; then PY=/work/venv/bin/python; else PY=python3; fi
BIN=${HX_BIN:-build/helix-bg}
[ -f "$DIR/vocab.txt" ] && [ -f "$DIR/tokenizer.json" ] || { echo "need $DIR/vocab.txt and tokenizer.json" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" - "$tmp" "$N" <<'PY'
import random, sys
tmp, n = sys.argv[1], int(sys.argv[2])
brk = {0x0a, 0x0b, 0x0c, 0x0d, 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029}   # line breaks for one side or the other
ok = lambda c: c not in brk and not 0xd800 <= c <= 0xdfff
with open(f"{tmp}/cp.txt", "w", encoding="utf-8", newline="\n") as f:
    for c in range(1, 0x110000):
        if ok(c): f.write(f"x{chr(c)}x {chr(c)}\n")
r = random.Random(7)
blocks = [(0x20, 0x7e)] * 6 + [(0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x4ff), (0x590, 0x6ff), (0x900, 0x97f),
          (0xe00, 0xe7f), (0x1e00, 0x1eff), (0x2000, 0x22ff), (0x2460, 0x24ff), (0x3000, 0x30ff), (0x3400, 0x3500),
          (0x4e00, 0x9fff), (0xac00, 0xd7a3), (0xf900, 0xfb4f), (0xfe30, 0xfe4f), (0xff00, 0xffff), (0x1d400, 0x1d7ff),
          (0x1f300, 0x1f9ff), (0x20000, 0x20100), (0xe000, 0xe010), (0x0, 0x1f), (0x7f, 0x9f)]
words = "the quick brown fox jumps over lazy dog café naïve résumé unbelievable tokenization 2026 3.14".split()
def ch():
    while True:
        a, b = r.choice(blocks); c = r.randint(a, b)
        if ok(c): return chr(c)
with open(f"{tmp}/rnd.txt", "w", encoding="utf-8", newline="\n") as f:
    for _ in range(n):
        f.write(" ".join(r.choice(words) if r.random() < 0.4 else "".join(ch() for _ in range(r.randint(1, 6)))
                         for _ in range(r.randint(1, 12))) + "\n")
PY
for f in cp rnd; do "$BIN" tokenize --tokenizer "$DIR/vocab.txt" --stdin < "$tmp/$f.txt" > "$tmp/$f.ids"; done
"$PY" - "$tmp" "$DIR" <<'PY'
import collections, json, sys, unicodedata as ud
import tokenizers
from tokenizers import Tokenizer
tmp, d = sys.argv[1:3]
t = Tokenizer.from_file(f"{d}/tokenizer.json"); t.no_padding(); t.no_truncation()
fail = 0
# Unicode 15.0 additions with marks/punctuation/format characters (utf8proc 2.8 knows them, Python 3.11 does not)
U15 = [(0x0ECE, 0x0ECE), (0x10EFD, 0x10EFF), (0x11241, 0x11241), (0x11B00, 0x11B09), (0x11F00, 0x11F59),
       (0x13439, 0x13455), (0x1E08F, 0x1E08F), (0x1E4D0, 0x1E4F9)]
# assigned or recategorised after Unicode 3.2 (HF's tables are of Unicode 8 or so)
drift = lambda c: (ud.ucd_3_2_0.category(c) != ud.category(c) and ud.category(c) != "Cn") or \
                  any(a <= ord(c) <= b for a, b in U15)
for name in ("cp", "rnd"):
    lines = open(f"{tmp}/{name}.txt", encoding="utf-8", newline="\n").read().split("\n")[:-1]
    ours = open(f"{tmp}/{name}.ids").read().split("\n")[:-1]
    assert len(ours) == len(lines)
    bad = []
    for i in range(0, len(lines), 50000):
        for k, enc in enumerate(t.encode_batch(lines[i:i + 50000])):
            if enc.ids != json.loads(ours[i + k]): bad.append(i + k)
    unexplained = [i for i in bad if not any(drift(c) for c in lines[i])]
    fail += len(unexplained)
    if name == "cp":
        cps = [ord(lines[i][1]) for i in bad]
        cats = collections.Counter(ud.category(chr(c)) for c in cps)
        old = [c for c in cps if ud.ucd_3_2_0.category(chr(c)) != "Cn"]
        print(f"code points: {len(lines)} checked with HF tokenizers {tokenizers.__version__}, {len(bad)} differ "
              f"(categories per Unicode {ud.unidata_version}: {dict(cats.most_common())}); "
              f"of those assigned in Unicode 3.2 already: {' '.join(f'U+{c:04X}' for c in old) or 'none'}; "
              f"unexplained by Unicode version changes: {len(unexplained)}")
    else:
        print(f"random lines: {len(lines)} checked, {len(bad)} differ, {len(unexplained)} of them without a "
              f"character assigned or recategorised after Unicode 3.2")
        for i in (unexplained or bad)[:3]:
            print(f"  {lines[i]!r}")
sys.exit(1 if fail else 0)
PY
