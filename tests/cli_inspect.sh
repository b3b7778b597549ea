#!/usr/bin/env bash
# helix-bg inspect on the CPU (../shared's tiny gemma3: five sliding-window layers
# of window 8, then a global one; stories260K): flags and their errors; --json
# is valid and its top tokens agree with --probs (raw f32: every row sums to 1);
# the heatmap is a valid PNG (signature, chunk CRCs, zlib stream, size) whose
# pixels show p = 1 at (0, 0) in yellow and masked cells in grey, both the
# causal mask and the sliding window's. Python 3 (standard library) reads them;
# without it the PNG is only checked with `file`.
set -uo pipefail
BIN=${HX_BIN:-build/helix-bg}
SHARED=${HX_SHARED:-../shared}
G="$SHARED/models/ref-tiny/tiny-gemma3-shared.gguf"
S="$SHARED/models/stories260K.gguf"
[ -f "$G" ] && [ -f "$S" ] || { echo "SKIP: $G or $S not found (set HX_SHARED)"; exit 77; }
[ -x "$BIN" ] || { echo "SKIP: helix-bg not found at $BIN (set HX_BIN)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# expect_err CODE PATTERN ARGS...: exits CODE and says PATTERN on stderr
expect_err() {
  local code=$1 pat=$2; shift 2
  "$BIN" inspect "$@" >/dev/null 2>"$tmp/err"; local rc=$?
  [ $rc = "$code" ] || bad "inspect $*: exit $rc, expected $code ($(cat "$tmp/err"))"
  grep -q -- "$pat" "$tmp/err" || bad "inspect $*: stderr lacks '$pat': $(cat "$tmp/err")"
}
"$BIN" inspect --help > "$tmp/help" || bad "--help exits $?"
for f in --layer --head --png --json --probs --prompt-ids --all-tokens; do
  grep -q -- "$f" "$tmp/help" || bad "--help lacks $f"
done
"$BIN" --help | grep -q "inspect" || bad "helix-bg --help does not list inspect"
expect_err 2 "-m FILE" -p hi
expect_err 2 "exactly one" -m "$S"
expect_err 2 "exactly one" -m "$S" -p hi --prompt-ids 1,2
expect_err 2 "--prompt-ids" -m "$S" --prompt-ids 1,99999
expect_err 2 "--layer" -m "$S" -p hi --layer abc
expect_err 1 "--layer 5" -m "$S" -p hi --layer 5
expect_err 1 "--head 8" -m "$S" -p hi --head 8
expect_err 1 "nope.gguf" -m "$tmp/nope.gguf" -p hi
expect_err 1 "$tmp/no/dir/x.png" -m "$S" -p hi --png "$tmp/no/dir/x.png"
[ -z "$(ls "$tmp/no" 2>/dev/null)" ] || bad "a failed --png left files behind"

P="Once upon a time, there was a little girl named Lily who loved to play"
"$BIN" inspect -m "$G" -p "$P" -t 2 --json --all-tokens --top 3 --probs "$tmp/p.f32" --png "$tmp/all.png" \
  > "$tmp/all.json" 2>"$tmp/err" || bad "inspect --json: $(cat "$tmp/err")"
"$BIN" inspect -m "$G" -p "$P" -t 2 --layer 0 --head 1 --png "$tmp/one.png" > "$tmp/one.txt" 2>"$tmp/err" ||
  bad "inspect --layer 0 --head 1: $(cat "$tmp/err")"
grep -q "^layer 0 head 1 (sliding window):" "$tmp/one.txt" || bad "text output lacks 'layer 0 head 1 (sliding window):'"
[ "$(grep -c '^layer' "$tmp/one.txt")" = 1 ] || bad "--layer 0 --head 1 printed $(grep -c '^layer' "$tmp/one.txt") heads"
"$BIN" inspect -m "$S" -p "$P" -t 2 > "$tmp/s.txt" 2>"$tmp/err" || bad "inspect stories260K: $(cat "$tmp/err")"
[ "$(grep -c '^layer' "$tmp/s.txt")" = 40 ] || bad "stories260K: $(grep -c '^layer' "$tmp/s.txt") heads listed, expected 5 x 8"

if command -v python3 >/dev/null; then
  python3 - "$tmp" <<'PY' || fail=1
import json, struct, sys, zlib
d = sys.argv[1]
bad = 0
def fail(msg):
    global bad
    print("FAIL:", msg); bad = 1

def read_png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "bad PNG signature"
    i, idat, ihdr, types = 8, b"", None, []
    while i < len(data):
        n, = struct.unpack(">I", data[i:i + 4])
        t, body = data[i + 4:i + 8], data[i + 8:i + 8 + n]
        crc, = struct.unpack(">I", data[i + 8 + n:i + 12 + n])
        assert zlib.crc32(t + body) == crc, f"CRC of {t} chunk"
        types.append(t)
        if t == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
        if t == b"IDAT": idat += body
        i += 12 + n
    assert types[0] == b"IHDR" and types[-1] == b"IEND", f"chunks {types}"
    w, h, depth, ctype = ihdr[:4]
    assert (depth, ctype) == (8, 2), f"depth {depth}, colour type {ctype}"
    raw = zlib.decompress(idat)
    assert len(raw) == h * (1 + 3 * w), f"{len(raw)} bytes for {w} x {h}"
    rows = [raw[y * (1 + 3 * w) + 1:(y + 1) * (1 + 3 * w)] for y in range(h)]
    assert all(raw[y * (1 + 3 * w)] == 0 for y in range(h)), "row filter"
    return w, h, lambda x, y: tuple(rows[y][3 * x:3 * x + 3])

j = json.loads(open(f"{d}/all.json", "rb").read().decode("utf-8"))
T, L, H = j["n_tok"], j["n_layer"], j["n_head"]
win = j["window"]
if not (len(j["ids"]) == T == len(j["tokens"]) and L == 6 and win[:5] == [8] * 5 and win[5] == 0 and T > 8):
    fail(f"json: {T} tokens, {L} layers, windows {win}")
probs = struct.unpack(f"<{L * H * T * T}f", open(f"{d}/p.f32", "rb").read())
P = lambda l, h, i, k: probs[((l * H + h) * T + i) * T + k]
worst = max(abs(sum(P(l, h, i, k) for k in range(T)) - 1) for l in range(L) for h in range(H) for i in range(T))
if worst > 1e-5: fail(f"--probs rows sum to 1 +- {worst}")
if len(j["heads"]) != L * H: fail(f"{len(j['heads'])} heads in json")
for e in j["heads"]:
    l, h = e["layer"], e["head"]
    if len(e["queries"]) != T: fail(f"layer {l} head {h}: {len(e['queries'])} queries"); break
    for q in e["queries"]:
        i = q["pos"]
        row = [P(l, h, i, k) for k in range(T)]
        best = sorted(range(i + 1), key=lambda k: (-row[k], k))[:3]
        if [t["pos"] for t in q["top"]] != best or any(abs(t["p"] - row[t["pos"]]) > 1e-5 for t in q["top"]):
            fail(f"layer {l} head {h} query {i}: top {q['top']} but --probs says {best}"); break

try:
    w, h, px = read_png(f"{d}/one.png")
    cell = w // T
    if w != T * cell or h != T * cell: fail(f"one.png is {w} x {h} for {T} tokens")
    at = lambda i, k: px(k * cell + cell // 2, i * cell + cell // 2)
    if at(0, 0) != (253, 231, 37): fail(f"p = 1 at (0, 0) drawn as {at(0, 0)}")
    if at(0, T - 1) != (128, 128, 128): fail(f"future cell drawn as {at(0, T - 1)}")
    if at(T - 1, 0) != (128, 128, 128): fail(f"cell outside the window drawn as {at(T - 1, 0)}")
    if at(T - 1, T - 1) == (128, 128, 128): fail("the diagonal is drawn masked")
    w2, h2, _ = read_png(f"{d}/all.png")
    if w2 < H * T or h2 < L * T: fail(f"all.png is {w2} x {h2} for {L} x {H} tiles of {T}")
    print(f"cli_inspect: {T} tokens, {L} x {H} heads; one.png {w} x {h}, all.png {w2} x {h2}")
except AssertionError as ex:
    fail(f"invalid PNG: {ex}")
sys.exit(bad)
PY
elif command -v file >/dev/null; then
  file "$tmp/one.png" | grep -q "PNG image data" || bad "file: $(file "$tmp/one.png")"
else
  echo "note: neither python3 nor file: PNGs not validated"
fi
[ $fail = 0 ] && echo "cli_inspect: ok"
exit $fail
