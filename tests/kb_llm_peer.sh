#!/usr/bin/env bash
# bench/kb_llm_peer.sh end to end on a tiny synthetic model: helix's side
# (pp512, classification, summaries) writes parseable rows with the fields
# results.jsonl needs, and bad flags or files are refused by name. llama-server's
# side runs too where LLAMA_SERVER names one (not in CI: no build of it there).
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
export HX_BIN=$BIN HX_KB_LLM_BENCH=${HX_KB_LLM_BENCH:-$(dirname "$BIN")/kb_llm_bench}
[[ -x "$HX_KB_LLM_BENCH" ]] || { echo "skip: no $HX_KB_LLM_BENCH"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# refused by name
expect_err() {  # expect_err WORD ARGS...: fails, and the message names WORD
  local word=$1; shift
  if bash bench/kb_llm_peer.sh "$@" > "$tmp/err" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$word" "$tmp/err" || { cat "$tmp/err"; fail "'$*' did not name $word"; }
}
bash bench/kb_llm_peer.sh --help | grep -q -- "--entries" || fail "--help lacks --entries"
"$BIN" synth --preset smollm-135m --type q8_0 --layers 1 --vocab 512 -o "$tmp/m.gguf" -t 2 > /dev/null
expect_err "--model" --entries 4
expect_err "$tmp/none.gguf" --model "$tmp/none.gguf"
expect_err "--device" --model "$tmp/m.gguf" --device gpu
expect_err "--entries" --model "$tmp/m.gguf" --entries many
expect_err "--bogus" --model "$tmp/m.gguf" --bogus
expect_err "--summaries" --model "$tmp/m.gguf" --entries 4 --summaries 8
expect_err "--llama-server" --model "$tmp/m.gguf" --device cpu --llama-server "$tmp/no-such-server"
expect_err "--engines" --model "$tmp/m.gguf" --engines helix,vllm

engines=helix
[[ -n "${LLAMA_SERVER:-}" && -x "${LLAMA_SERVER:-}" ]] && engines=helix,llama.cpp
bash bench/kb_llm_peer.sh --model "$tmp/m.gguf" --device cpu --entries 6 --summaries 3 --max-tokens 4 -t 2 \
  --engines "$engines" --jsonl "$tmp/rows.jsonl" > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "the run failed"; }
python3 - "$tmp/rows.jsonl" "$engines" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want = {("helix", "pp512"), ("helix", "kb-classify"), ("helix", "kb-summaries")}
if "llama.cpp" in sys.argv[2]:
    want |= {("llama.cpp", "kb-classify"), ("llama.cpp", "kb-summaries")}
got = {(r["engine"], r["test"]) for r in rows}
assert got == want, got
for r in rows:
    for k in ("date", "commit", "device", "engine", "model", "mix", "test", "tokens_per_s"):
        assert k in r, (k, r)
    if r["test"] != "pp512":
        assert r["entries"] == (6 if r["test"] == "kb-classify" else 3), r
        assert r["entries_per_s"] > 0 and r["concurrency"] >= 1, r
    if r["test"] == "kb-classify":
        assert r["prompt_tokens"] > 0 and 0 <= r["accuracy"] <= 1, r
    if r["test"] == "kb-summaries" and r["engine"] == "helix":
        assert 0 < r["generated_tokens"] <= 3 * 4, r
print(f"kb_llm_peer: {len(rows)} rows ({sys.argv[2]})")
PY
