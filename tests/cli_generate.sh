#!/usr/bin/env bash
# helix-bg generate on stories260K (a SentencePiece vocabulary with byte-fallback
# tokens): --json and the streamed text are valid UTF-8 even when sampling emits
# byte tokens that never form a character (they become U+FFFD); --top2 has one
# entry per generated token; --stop cuts the text before the stop string;
# generated text + prompt ids agree between --json and the streamed run.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
SHARED=${HX_SHARED:-../shared}
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# high-temperature sampling over the whole vocabulary emits byte tokens (ids 3..258 in this vocabulary)
for s in 1 2 3 4 5 6; do
  "$BIN" generate -m "$M" -p "Once" -n 200 --temp 3 --top-k 0 --top-p 1 --min-p 0 --seed $s -t 2 --json \
    > "$tmp/j$s" 2>/dev/null
  "$BIN" generate -m "$M" -p "Once" -n 200 --temp 3 --top-k 0 --top-p 1 --min-p 0 --seed $s -t 2 \
    > "$tmp/t$s" 2>/dev/null
done
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
n_bytes = 0
for s in range(1, 7):
    raw = open(f"{d}/j{s}", "rb").read()
    raw.decode("utf-8")                       # strict: raises on invalid UTF-8
    j = json.loads(raw)
    n_bytes += sum(1 for i in j["generated_ids"] if 3 <= i <= 258)
    text = open(f"{d}/t{s}", "rb").read().decode("utf-8")
    assert text.endswith("\n"), "the streamed text does not end with a newline"
    assert text[:-1] == j["text"] or text == j["text"], (s, text[-40:], j["text"][-40:])
assert n_bytes > 0, "no byte tokens were sampled: the test checked nothing"
print(f"valid UTF-8 in --json and the stream ({n_bytes} byte tokens sampled)")
PY
"$BIN" generate -m "$M" -p "Once upon a time" -n 12 -t 2 --json --top2 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert len(j["top2"]) == len(j["generated_ids"]) > 0, j
assert all(int(t[0]) == g and t[1] >= t[3] for t, g in zip(j["top2"], j["generated_ids"])), j["top2"]
print("--top2: one [id, logit, id, logit] per greedy token, the first is the token")'
full=$("$BIN" generate -m "$M" -p "Once upon a time" -n 40 -t 2 --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])')
stop=$(python3 -c 'import sys; t=sys.argv[1]; print(t[len(t)//2:len(t)//2+4])' "$full")
"$BIN" generate -m "$M" -p "Once upon a time" -n 40 -t 2 --json --stop "$stop" 2>/dev/null | python3 -c '
import json, sys
full, stop = sys.argv[1], sys.argv[2]
j = json.load(sys.stdin)
assert j["stop"] == "stop_string" and j["text"] == full[:full.index(stop)], (j, stop)
print("--stop: the text before the stop string")' "$full" "$stop"
# loading progress: on a terminal for a file over 100 MB (Gemma 3 270M, 253 MB), never into a pipe
G="${HELIX_REAL_DIR:-$HOME/.cache/helix/real}/gemma-3-270m-q4_k_m.gguf"
if [ -f "$G" ]; then
  python3 - "$BIN" "$G" <<'PY'
import os, pty, select, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "generate", "-m", sys.argv[2], "-p", "Hi", "-n", "2", "-t", "2"])
out = b""
while True:
    r, _, _ = select.select([fd], [], [], 60)
    if not r: break
    try: d = os.read(fd, 4096)
    except OSError: break
    if not d: break
    out += d
os.waitpid(pid, 0)
assert b"loading 100%" in out, out[:300]
print("progress shown on a terminal")
PY
  "$BIN" generate -m "$G" -p "Hi" -n 2 -t 2 2> "$tmp/err" > /dev/null
  ! grep -q loading "$tmp/err" || { echo "FAIL: progress written into a pipe"; exit 1; }
else
  echo "skip: $G not found (bench/real_models_fetch.sh): the progress check"
fi
# --layer-split on the CPU (a test of the split): the same ids as no split; refusals name the flags
"$BIN" generate -m "$M" -p "Once" -n 24 --temp 0 -t 2 --device cpu --json 2>/dev/null | grep -o '"generated_ids":[^]]*' > "$tmp/ls1"
"$BIN" generate -m "$M" -p "Once" -n 24 --temp 0 -t 2 --device cpu --layer-split 3 --json 2>/dev/null \
  | grep -o '"generated_ids":[^]]*' > "$tmp/ls3"
[ -s "$tmp/ls1" ] && cmp -s "$tmp/ls1" "$tmp/ls3" || { echo "FAIL: --layer-split 3 changed the greedy ids"; exit 1; }
! "$BIN" generate -m "$M" -p "Once" -n 2 --device cpu --layer-split 2 -tp 2 2> "$tmp/err" > /dev/null
grep -q -- "--layer-split 2 with -tp 2" "$tmp/err" || { echo "FAIL: --layer-split with -tp:"; cat "$tmp/err"; exit 1; }
! "$BIN" generate -m "$M" -p "Once" -n 2 --device cpu --layer-split 16 2> "$tmp/err" > /dev/null
grep -q "layer_split 16: the model has 5 layers" "$tmp/err" || { echo "FAIL: --layer-split 16:"; cat "$tmp/err"; exit 1; }
echo "1 passed, 0 failed"
