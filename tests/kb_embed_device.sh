#!/usr/bin/env bash
# one-shot's --embed-device: a bad value is a usage error naming it; a device
# other than cpu without --embed-model is refused (the lexical embedder has
# none); --embed-device cpu gives the default's embeddings.bin and
# insights.json byte for byte; cuda in a build or on a machine without it
# fails naming the flag (with CUDA and a GPU: the pass runs). BERT: a 2-layer
# MiniLM-shaped model from helix-bg synth with ../shared's bert-base-uncased
# vocabulary; that part is skipped when ../shared lacks it.
set -uo pipefail
BIN=${HX_BIN:-build/helix-bg}
[ -x "$BIN" ] || { echo "FAIL: $BIN not built"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
mkdir "$tmp/kb"; cp examples/kb/data.log "$tmp/kb/"

"$BIN" one-shot "$tmp/kb" --embed-device gpu > /dev/null 2> "$tmp/err"; rc=$?
[ $rc = 2 ] && grep -q -- "--embed-device" "$tmp/err" || bad "--embed-device gpu: exit $rc, $(head -1 "$tmp/err")"
"$BIN" one-shot "$tmp/kb" --embed-device cuda > /dev/null 2> "$tmp/err"; rc=$?
[ $rc = 1 ] && grep -q "needs --embed-model" "$tmp/err" || bad "--embed-device cuda, lexical: exit $rc, $(cat "$tmp/err")"
[ -e "$tmp/kb/embeddings.bin" ] && bad "a refused pass wrote embeddings.bin"

SHARED=${HX_SHARED:-../shared}
VOCAB=$SHARED/tokenizers/vocab-gguf/ggml-vocab-bert-bge.gguf
if [ ! -f "$VOCAB" ]; then
  echo "BERT part skipped: $VOCAB absent"
else
  M=$tmp/minilm2.gguf
  "$BIN" synth --preset minilm-l6 --type f32 --layers 2 --tokenizer "$VOCAB" -o "$M" -t 2 > /dev/null 2>&1 ||
    { echo "FAIL: synth"; exit 1; }
  cp -r "$tmp/kb" "$tmp/a"; cp -r "$tmp/kb" "$tmp/b"
  "$BIN" one-shot "$tmp/a" --embed-model "$M" -t 2 --no-think -q 2> "$tmp/a.err" || bad "default device: $(cat "$tmp/a.err")"
  "$BIN" one-shot "$tmp/b" --embed-model "$M" --embed-device cpu -t 2 --no-think 2> "$tmp/b.err" > /dev/null ||
    bad "--embed-device cpu: $(cat "$tmp/b.err")"
  cmp -s "$tmp/a/embeddings.bin" "$tmp/b/embeddings.bin" || bad "--embed-device cpu: embeddings.bin differs from the default's"
  cmp -s "$tmp/a/insights.json" "$tmp/b/insights.json" || bad "--embed-device cpu: insights.json differs from the default's"
  grep -q "^embedding: [0-9]* texts with minilm2.gguf, .* texts/s" "$tmp/b.err" || bad "no 'embedding:' line: $(cat "$tmp/b.err")"
  grep -q "^embedding: " "$tmp/a.err" && bad "-q printed the embedding line"
  cp -r "$tmp/kb" "$tmp/c"
  if "$BIN" one-shot "$tmp/c" --embed-model "$M" --embed-device cuda -t 2 --no-think -q 2> "$tmp/c.err"; then
    [ -s "$tmp/c/embeddings.bin" ] || bad "--embed-device cuda: no embeddings.bin"
    echo "--embed-device cuda ran (a GPU is here)"
  else
    grep -q -- "--embed-device" "$tmp/c.err" || bad "--embed-device cuda failed without naming the flag: $(cat "$tmp/c.err")"
  fi
fi
[ $fail = 0 ] && echo "kb_embed_device: all passed"
exit $fail
