#!/usr/bin/env bash
# helix-bg chat: multi-turn over stdin reuses the KV cache (the second turn runs
# only its new tokens), falls back to ChatML with a warning for a model without
# a template, and reports bad input clearly.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
SHARED=${HX_SHARED:-../shared}
M="$SHARED/models/ref-tiny/tiny-qwen3-shared.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'Hello there\nTell me more\n/reset\nAgain\n' | "$BIN" chat -m "$M" --temp 0 -n 6 -t 2 > "$tmp/out" 2> "$tmp/err"
cat "$tmp/err"
grep -q "template" "$tmp/err"
mapfile -t stats < <(grep -o 'prompt [0-9]* new of [0-9]* tokens' "$tmp/err")
[ ${#stats[@]} = 3 ] || { echo "FAIL: expected 3 turns"; exit 1; }
read -r _ new2 _ _ total2 _ <<< "${stats[1]}"
[ "$new2" -lt "$total2" ] || { echo "FAIL: second turn did not reuse the cache (${stats[1]})"; exit 1; }
if "$BIN" chat -m /nonexistent.gguf < /dev/null 2> "$tmp/err2"; then echo "FAIL: missing model accepted"; exit 1; fi
grep -q nonexistent "$tmp/err2" || { echo "FAIL: error does not name the file"; exit 1; }
if "$BIN" chat -m "$M" --device tpu < /dev/null 2> "$tmp/err3"; then echo "FAIL: --device tpu accepted"; exit 1; fi
grep -q "tpu" "$tmp/err3" || { echo "FAIL: bad --device not named"; exit 1; }
printf 'Hello there\n' | "$BIN" chat -m "$M" --temp 0 -n 4 -t 2 --device cpu > /dev/null 2> "$tmp/err4"
grep -q ", cpu;" "$tmp/err4" || { echo "FAIL: --device cpu did not run on the CPU"; cat "$tmp/err4"; exit 1; }
echo "1 passed, 0 failed"
