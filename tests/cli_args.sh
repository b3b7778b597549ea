#!/usr/bin/env bash
# helix-bg's flag conventions: every subcommand answers --help on stdout with
# exit 0 (the ones on the shared parser also show their defaults); numbers are
# parsed strictly and a bad flag or value is an error (exit 2) that names the
# flag and the value. Needs no model: all of this is decided before loading.
set -uo pipefail
BIN=${HX_BIN:-build/helix-bg}
[ -x "$BIN" ] || { echo "FAIL: $BIN not built"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

cmds=(generate chat bench embed tokenize synth load-model cpu-test gpu-test one-shot daemon embed-test)
for c in "${cmds[@]}"; do
  if "$BIN" "$c" --help > "$tmp/out" 2> "$tmp/err"; then
    grep -qi "usage" "$tmp/out" || bad "$c --help: no usage on stdout"
    [ -s "$tmp/err" ] && bad "$c --help wrote to stderr: $(head -1 "$tmp/err")"
  else bad "$c --help: exit $?"; fi
done
"$BIN" --help | grep -q generate || bad "helix-bg --help lists no commands"
ok "--help on ${#cmds[@]} subcommands"

# defaults appear in the help of the commands on the shared parser
"$BIN" generate --help | grep -- '-n, --n-predict' | grep -q '(default: 64)' || bad "generate --help: -n default"
"$BIN" generate --help | grep -- '--temp' | grep -q '(default: 0)' || bad "generate --help: --temp default"
"$BIN" chat --help | grep -- '--temp' | grep -q '(default: 0.7)' || bad "chat --help: --temp default"
"$BIN" bench --help | grep -- '-r, --repetitions' | grep -q '(default: 3)' || bad "bench --help: -r default"
"$BIN" bench --help | grep -q -- '--batch' || bad "bench --help: no --batch"
"$BIN" embed --help | grep -- '--max-tokens' | grep -q '(default: 256)' || bad "embed --help: --max-tokens default"
ok "defaults in --help"

# expect_err WANT1 WANT2 -- ARGS...: exit 2 and a message naming both
expect_err() {
  local w1=$1 w2=$2; shift 3
  "$BIN" "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [ $rc -ne 2 ]; then bad "exit $rc (want 2): $*"; return; fi
  grep -qF -- "$w1" "$tmp/err" && grep -qF -- "$w2" "$tmp/err" || bad "message lacks '$w1' / '$w2' for: $* -> $(cat "$tmp/err")"
}
M=/nonexistent.gguf   # never opened: every case fails while parsing
expect_err -n abc -- generate -m $M -p x -n abc
expect_err -n 5x -- generate -m $M -p x -n 5x
expect_err -n '' -- generate -m $M -p x -n ''
expect_err -n -2 -- generate -m $M -p x -n -2
expect_err --temp abc -- generate -m $M -p x --temp abc
expect_err --temp nan -- generate -m $M -p x --temp nan
expect_err --top-k 1.5 -- generate -m $M -p x --top-k 1.5
expect_err --seed -1 -- generate -m $M -p x --seed -1
expect_err --device tpu -- generate -m $M -p x --device tpu
expect_err --kv q8 -- generate -m $M -p x --kv q8
expect_err --bogus bogus -- generate -m $M -p x --bogus
expect_err -n 'needs a value' -- generate -m $M -p x -n
expect_err --json "takes no value (got '1')" -- generate -m $M -p x --json=1
expect_err -c 12k -- chat -m $M -c 12k
expect_err --min-p 2 -- chat -m $M --min-p 2
expect_err -p -1 -- bench -m $M -p -1
expect_err -r 0 -- bench -m $M -r 0
expect_err --batch 8x -- bench -m $M --batch 1,8x
expect_err --batch 0 -- bench -m $M --batch 0
expect_err --max-tokens 1e3 -- embed -m $M --max-tokens 1e3
expect_err --format csv -- embed -m $M --format csv
expect_err --frob frob -- tokenize -m $M -p x --frob
expect_err --layers 300 -- synth --preset qwen3-0.6b --type f32 -o /dev/null --layers 300
ok "bad flags and values name the flag and the value"

# --flag=value is --flag value: the error then comes from opening the model, not from parsing
"$BIN" generate --model=$M -p x --n-predict=-1 > /dev/null 2> "$tmp/err"; rc=$?
[ $rc = 1 ] && grep -q nonexistent "$tmp/err" || bad "--model=FILE / --n-predict=-1 not taken (exit $rc: $(cat "$tmp/err"))"
ok "--flag=value"

# -n -1 (until the end) and the text's final newline, on a real model when ../shared has one
SHARED=${HX_SHARED:-../shared}
T="$SHARED/models/stories260K.gguf"
if [ -f "$T" ]; then
  "$BIN" generate -m "$T" -p "Once upon a time" -n -1 -c 80 -t 2 > "$tmp/gen" 2> "$tmp/err" || bad "generate -n -1 failed: $(cat "$tmp/err")"
  [ "$(tail -c 1 "$tmp/gen" | od -An -c | tr -d ' ')" = '\n' ] || bad "generate's text does not end with a newline"
  grep -q 'decode [0-9]* tokens' "$tmp/err" || bad "generate printed no statistics"
  "$BIN" generate -m "$T" -p "Once upon a time" -n -1 -c 80 -t 2 --json > "$tmp/j" 2>/dev/null || bad "generate --json -n -1 failed"
  python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["stop"] in ("eog", "context"), j["stop"]
# the last token comes from the logits of position 79: it needs no position of its own
assert len(j["prompt_ids"]) + len(j["generated_ids"]) <= 81
' "$tmp/j" || bad "generate -n -1 --json: not stopped by end of generation or context"
  ok "-n -1 runs to the end; the text ends with a newline"
else
  echo "skip: $T not found (the -n -1 run)"
fi
[ $fail = 0 ] && echo "cli_args: all passed"
exit $fail
