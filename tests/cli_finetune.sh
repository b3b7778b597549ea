#!/usr/bin/env bash
# cli_finetune.sh — helix-bg finetune and kb-to-dataset end to end: a tiny random
# smollm-shaped model (Q4_1, so the base is dequantized) learns a small prompt ->
# completion set: the CSV loss curve falls, the PNG plot of it is a valid image
# with both curves drawn, the adapter loads with generate --lora,
# the held-out loss falls (accuracy is reported); chat-format data from
# kb-to-dataset trains too; bad inputs fail with the file and line named.
set -u
cd "$(dirname "$0")/.."
BIN="${HX_BIN:-build/helix-bg}"
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
tmp="$(mktemp -d /tmp/hx_cli_finetune.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$BIN" synth --preset smollm-135m --type q4_1 --layers 2 --vocab 1024 -o "$tmp/m.gguf" -t 2 >/dev/null 2>&1 ||
  fail "synth"
: > "$tmp/train.jsonl"
for i in $(seq 1 24); do
  case $((i % 3)) in 0) c=" red";; 1) c=" green";; 2) c=" blue";; esac
  printf '{"prompt": "item %d is", "completion": "%s"}\n' "$i" "$c" >> "$tmp/train.jsonl"
done
head -6 "$tmp/train.jsonl" > "$tmp/eval.jsonl"

"$BIN" finetune -m "$tmp/m.gguf" --data "$tmp/train.jsonl" --eval "$tmp/eval.jsonl" -o "$tmp/a.gguf" \
  --steps 30 --batch 8 --lr 5e-3 --rank 4 -t 2 --save-tokens "$tmp/tok.jsonl" --eval-every 10 --plot-every 7 \
  > "$tmp/out.txt" 2>&1 ||
  { cat "$tmp/out.txt"; fail "finetune exited non-zero"; }
grep -q "^step    30/30 " "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "no progress line for step 30"; }
grep -q "tok/s" "$tmp/out.txt" || fail "progress lines lack tokens/s"
grep -q "^eval before: " "$tmp/out.txt" && grep -q "^eval after: " "$tmp/out.txt" || fail "no eval lines"
[ -s "$tmp/a.gguf" ] || fail "no adapter written"
[ "$(wc -l < "$tmp/a.gguf.csv")" = 31 ] || fail "CSV has $(wc -l < "$tmp/a.gguf.csv") lines, expected 31"
first=$(sed -n 2p "$tmp/a.gguf.csv" | cut -d, -f3)
last=$(tail -n 3 "$tmp/a.gguf.csv" | cut -d, -f3 | sort -g | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }' || fail "loss $first -> $last: did not halve"
[ "$(wc -l < "$tmp/tok.jsonl")" = 24 ] || fail "--save-tokens wrote $(wc -l < "$tmp/tok.jsonl") lines"
# held-out loss at steps 10 and 20 (--eval-every) and 30 (after): in the log and the CSV's last column
grep -q "^eval step 10: loss " "$tmp/out.txt" && grep -q "^eval step 20: loss " "$tmp/out.txt" || fail "no --eval-every lines"
head -1 "$tmp/a.gguf.csv" | grep -q ",eval_loss$" || fail "CSV header: $(head -1 "$tmp/a.gguf.csv")"
[ "$(awk -F, 'NR > 1 && $9 != "" { printf "%s ", $1 }' "$tmp/a.gguf.csv")" = "10 20 30 " ] ||
  fail "CSV eval_loss at steps $(awk -F, 'NR > 1 && $9 != "" { printf "%s ", $1 }' "$tmp/a.gguf.csv") (want 10 20 30)"
# the loss curve as PNG: signature, chunk CRCs, 960 x 540 8-bit RGB, a zlib stream of the right size, and
# pixels of both curves' colours (train blue, held-out orange); no temp files left beside it
if command -v python3 >/dev/null; then
  python3 - "$tmp/a.gguf.png" <<'PY' || fail "a.gguf.png is not the plot it should be"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "bad PNG signature"
i, idat, ihdr, types = 8, b"", None, []
while i < len(data):
    n, = struct.unpack(">I", data[i:i + 4])
    t, body = data[i + 4:i + 8], data[i + 8:i + 8 + n]
    assert zlib.crc32(t + body) == struct.unpack(">I", data[i + 8 + n:i + 12 + n])[0], f"CRC of {t}"
    types.append(t)
    if t == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
    if t == b"IDAT": idat += body
    i += 12 + n
assert types[0] == b"IHDR" and types[-1] == b"IEND", types
w, h, depth, ctype = ihdr[:4]
assert (w, h, depth, ctype) == (960, 540, 8, 2), ihdr
raw = zlib.decompress(idat)
assert len(raw) == h * (1 + 3 * w), f"{len(raw)} bytes for {w} x {h}"
px = set()
for y in range(h):
    row = raw[y * (1 + 3 * w) + 1:(y + 1) * (1 + 3 * w)]
    px.update(row[3 * x:3 * x + 3] for x in range(w))
assert bytes((31, 119, 180)) in px and bytes((230, 110, 20)) in px, "a curve's colour is missing"
assert bytes((255, 255, 255)) in px and bytes((40, 40, 40)) in px, "no background or text"
print(f"cli_finetune: a.gguf.png {w} x {h}, {len(data)} bytes, {len(px)} colours")
PY
else
  head -c 8 "$tmp/a.gguf.png" | od -An -c | grep -q "P   N   G" || fail "a.gguf.png has no PNG signature"
fi
[ -z "$(ls "$tmp" | grep -E '\.(png|csv)\.')" ] || fail "temp files left: $(ls "$tmp")"
lb=$(sed -n 's/^eval before: loss \([0-9.]*\),.*/\1/p' "$tmp/out.txt")
la=$(sed -n 's/^eval after: loss \([0-9.]*\),.*/\1/p' "$tmp/out.txt")
awk -v a="$la" -v b="$lb" 'BEGIN { exit !(a < 0.1 * b) }' || { cat "$tmp/out.txt"; fail "held-out loss $lb -> $la"; }
"$BIN" generate -m "$tmp/m.gguf" --lora "$tmp/a.gguf" -p "item 5 is" -n 2 --temp 0 > "$tmp/gen.txt" 2>&1 ||
  { cat "$tmp/gen.txt"; fail "generate --lora could not use the adapter"; }

# kb-to-dataset: every live entry once, split by --test-every, valid chat lines that train
"$BIN" kb-to-dataset examples/kb --test-out "$tmp/kb_test.jsonl" --test-every 4 > "$tmp/kb.jsonl" 2>"$tmp/kb.err" ||
  { cat "$tmp/kb.err"; fail "kb-to-dataset"; }
n_tr=$(wc -l < "$tmp/kb.jsonl"); n_te=$(wc -l < "$tmp/kb_test.jsonl")
# the live entries, as a pass counts them (a copy: the example KB stays as it is)
mkdir "$tmp/kbcopy"; cp examples/kb/data.log "$tmp/kbcopy/"
"$BIN" one-shot "$tmp/kbcopy" --no-think -q || fail "one-shot on a copy of examples/kb"
live=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['entries'])" "$tmp/kbcopy/insights.json")
[ "$live" -gt 100 ] || fail "examples/kb has $live live entries"
[ $((n_tr + n_te)) = "$live" ] && [ "$n_te" = $((live / 4)) ] ||
  fail "kb-to-dataset wrote $n_tr + $n_te lines ($live live entries, every 4th held out)"
grep -q '"role":"assistant","content":"databases"' "$tmp/kb.jsonl" || fail "no databases answer in the KB set"
# chat-format lines need a chat template: the tiny gemma3 of ../shared (sliding-window layers, f16)
G="${HX_SHARED:-../shared}/models/ref-tiny/tiny-gemma3-shared.gguf"
if [ -f "$G" ]; then
  head -16 "$tmp/kb.jsonl" > "$tmp/kb16.jsonl"
  "$BIN" finetune -m "$G" --data "$tmp/kb16.jsonl" -o "$tmp/kb.gguf" --steps 2 --batch 4 -t 2 --checkpoint \
    > "$tmp/kbft.txt" 2>&1 || { cat "$tmp/kbft.txt"; fail "finetune on chat-format KB data"; }
  grep -q "^step     2/2 " "$tmp/kbft.txt" || fail "no step 2 on the KB data"
else
  echo "note: $G not found (set HX_SHARED): chat-format training not checked"
fi

# bad input names the file and line, or the flag
printf '{"prompt": "a", "completion": " b"}\n{"prompt": 3}\n' > "$tmp/bad.jsonl"
"$BIN" finetune -m "$tmp/m.gguf" --data "$tmp/bad.jsonl" -o "$tmp/x.gguf" > "$tmp/bad.txt" 2>&1
[ $? = 1 ] && grep -q "bad.jsonl:2:" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "a bad line is not reported by file:line"; }
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "x"}]}\n' > "$tmp/bad2.jsonl"
"$BIN" finetune -m "$tmp/m.gguf" --data "$tmp/bad2.jsonl" -o "$tmp/x.gguf" > "$tmp/bad.txt" 2>&1
[ $? = 1 ] && grep -q "not the assistant" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "messages without the assistant's answer"; }
"$BIN" finetune -m "$tmp/m.gguf" -o "$tmp/x.gguf" > "$tmp/bad.txt" 2>&1
[ $? = 2 ] || fail "missing --data is not a usage error"
"$BIN" finetune -m "$tmp/m.gguf" --data "$tmp/train.jsonl" -o "$tmp/x.gguf" --eval-every 5 > "$tmp/bad.txt" 2>&1
[ $? = 2 ] && grep -q -- "--eval-every needs --eval" "$tmp/bad.txt" || fail "--eval-every without --eval is not a usage error"
"$BIN" finetune -m "$tmp/m.gguf" --data "$tmp/train.jsonl" -o "$tmp/x.gguf" --steps 1 -t 2 --png "$tmp/no/dir/x.png" \
  > "$tmp/bad.txt" 2>&1
[ $? = 1 ] && grep -q "$tmp/no/dir/x.png" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "an unwritable --png is not named"; }
"$BIN" finetune -m "$tmp/m.gguf" --data "$tmp/train.jsonl" -o "$tmp/x.gguf" --rank 0 > "$tmp/bad.txt" 2>&1
[ $? = 2 ] && grep -q -- "--rank" "$tmp/bad.txt" || fail "--rank 0 is not rejected by name"
"$BIN" finetune -m "$tmp/missing.gguf" --data "$tmp/train.jsonl" -o "$tmp/x.gguf" > "$tmp/bad.txt" 2>&1
[ $? = 1 ] && grep -q "missing.gguf" "$tmp/bad.txt" || fail "a missing model is not named"
[ ! -e "$tmp/x.gguf" ] || fail "a failed run left an adapter"
echo "cli_finetune: ok ($(grep '^eval after' "$tmp/out.txt"))"
