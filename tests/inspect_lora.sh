#!/usr/bin/env bash
# helix-bg inspect --lora / --lora-scaled on the CPU (../shared's stories260K, an untied llama): a PEFT
# folder from tests/lora_make_adapter.py on the 7 projections, embed_tokens and lm_head.
#   - at scale 0 the output (--json and the raw --probs) is byte for byte the base's;
#   - at scale 1 the probabilities differ from the base's (the adapter reaches the attention), and the
#     folder and its `helix-bg lora-convert` GGUF (token_embd's lora_a transposed, llama.cpp's layout)
#     give the same bytes;
#   - --lora-scaled 0.5 differs from scale 1; a missing adapter and one for another model fail.
# What the adapted attention must be, against a float64 forward, is test_inspect_lora.
set -uo pipefail
BIN=${HX_BIN:-build/helix-bg}
SHARED=${HX_SHARED:-../shared}
S="$SHARED/models/stories260K.gguf"
Q="$SHARED/models/ref-tiny/tiny-qwen3-shared.gguf"
[ -f "$S" ] || { echo "SKIP: $S not found (set HX_SHARED)"; exit 77; }
[ -x "$BIN" ] || { echo "SKIP: helix-bg not found at $BIN (set HX_BIN)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found (tests/lora_make_adapter.py)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

python3 tests/lora_make_adapter.py "$tmp/ad" --layers 5 --embd 64 --ff 172 --heads 8 --kv-heads 4 --vocab 512 \
  --rank 4 --alpha 8 --seed 7 --b-amp 0.1 --embd-b-amp 0.1 --head-b-amp 0.1 \
  --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,embed_tokens,lm_head >/dev/null ||
  { bad "lora_make_adapter.py failed"; exit 1; }
"$BIN" lora-convert "$tmp/ad" -m "$S" -o "$tmp/ad.gguf" 2>"$tmp/err" || bad "lora-convert: $(cat "$tmp/err")"

run() { # NAME ARGS...: --json to NAME.json, probabilities to NAME.f32
  local name=$1; shift
  "$BIN" inspect -m "$S" -p "Once upon a time, there was a little girl" --json -t 1 --probs "$tmp/$name.f32" "$@" \
    >"$tmp/$name.json" 2>"$tmp/$name.err" || bad "inspect $*: exit $? ($(cat "$tmp/$name.err"))"
}
run base
run zero --lora-scaled "$tmp/ad" 0
run one --lora "$tmp/ad"
run one_gguf --lora "$tmp/ad.gguf"
run half --lora-scaled "$tmp/ad.gguf" 0.5
cmp -s "$tmp/base.json" "$tmp/zero.json" || bad "--lora-scaled ADAPTER 0 changes the --json output"
cmp -s "$tmp/base.f32" "$tmp/zero.f32" || bad "--lora-scaled ADAPTER 0 changes the probabilities"
cmp -s "$tmp/base.f32" "$tmp/one.f32" && bad "--lora ADAPTER leaves the probabilities as the base's"
cmp -s "$tmp/one.f32" "$tmp/one_gguf.f32" || bad "the PEFT folder and its GGUF conversion give different probabilities"
cmp -s "$tmp/one.f32" "$tmp/half.f32" && bad "scale 0.5 gives scale 1's probabilities"
python3 - "$tmp" <<'PY' || fail=1
import json, struct, sys
t = sys.argv[1]
def probs(n):
    b = open(f"{t}/{n}.f32", "rb").read()
    return struct.unpack("<%df" % (len(b) // 4), b)
base, one = probs("base"), probs("one")
d = max(abs(x - y) for x, y in zip(base, one))
j = json.load(open(f"{t}/one.json"))
print(f"inspect --lora: {j['n_layer']} layers x {j['n_head']} heads, {j['n_tok']} tokens; max |p(adapted) - p(base)| {d:.3f}")
if d < 1e-2:
    print("FAIL: the adapter moves no probability by 0.01"); sys.exit(1)
PY

"$BIN" inspect -m "$S" -p hi --lora "$tmp/none" >/dev/null 2>"$tmp/err" && bad "a missing adapter is accepted"
grep -q "$tmp/none" "$tmp/err" || bad "a missing adapter's error does not name it: $(cat "$tmp/err")"
if [ -f "$Q" ]; then
  "$BIN" inspect -m "$Q" -p hi --lora "$tmp/ad.gguf" >/dev/null 2>"$tmp/err" && bad "an adapter for another model is accepted"
  grep -q -- "--lora" "$tmp/err" || bad "an adapter for another model: $(cat "$tmp/err")"
fi
"$BIN" inspect --help | grep -q -- "--lora" || bad "inspect --help does not mention --lora"
[ $fail = 0 ] && echo "inspect_lora: ok"
exit $fail
