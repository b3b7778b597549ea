#!/usr/bin/env bash
# helix-bg tokenize: prompt ids of every stories260K reference (llama.cpp's, BOS included) reproduced
# through the CLI with --ids; clear errors (non-zero exit, message) for missing files and bad usage.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
SHARED=${HX_SHARED:-../shared}
[ -f "$SHARED/refs/stories260K-greedy.jsonl" ] || { echo "SKIP: $SHARED/refs not found"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
python3 - "$BIN" "$SHARED" <<'PY'
import json, os, subprocess, sys
binp, sh = sys.argv[1], sys.argv[2]
n = ok = 0
for line in open(f"{sh}/refs/stories260K-greedy.jsonl"):
    r = json.loads(line)
    out = subprocess.run([binp, "tokenize", "-m", f"{sh}/models/{r['model']}", "-p", r["prompt"], "--ids"],
                         capture_output=True, text=True, check=True).stdout
    n += 1; ok += json.loads(out) == r["prompt_ids"]
    if json.loads(out) != r["prompt_ids"]: print("MISMATCH", r["model"], repr(r["prompt"]), out.strip(), r["prompt_ids"])
print(f"stories260K prompt ids: {ok}/{n} pass")
assert n > 0 and ok == n
for args in (["-m", "/nonexistent.gguf", "-p", "x"], ["-p", "x"], ["--tokenizer", f"{sh}/README.md", "-p", "x"]):
    p = subprocess.run([binp, "tokenize", *args], capture_output=True, text=True)
    assert p.returncode != 0 and p.stderr.strip(), (args, p.returncode, p.stderr)
print("errors ok")
# a tokenizer alone (--tokenizer: tokenizer.json, tokenizer.model, vocab.txt) against the Hugging Face
# references, with the flags the references were made with (as tests/test_tok.c)
cases = [("tokenizers/qwen3.tokenizer.json", "tok_qwen3-hf", ["--no-special", "--parse-special"]),
         ("tokenizers/llama3.tokenizer.json", "tok_llama3-hf", ["--no-special", "--parse-special"]),
         ("tokenizers/llama2.tokenizer.model", "tok_llama2-spm", ["--no-special"]),
         ("tokenizers/bert-base-uncased.vocab.txt", "tok_bert-uncased", [])]
for tokf, ref, flags in cases:
    if not os.path.exists(f"{sh}/{tokf}"):
        print("skip:", tokf); continue
    n = ok = 0
    for line in open(f"{sh}/tokenizers/refs/{ref}.jsonl"):
        r = json.loads(line)
        out = subprocess.run([binp, "tokenize", "--tokenizer", f"{sh}/{tokf}", "-p", r["text"], "--ids", *flags],
                             capture_output=True, text=True, check=True).stdout
        n += 1; ok += json.loads(out) == r["ids"]
        if json.loads(out) != r["ids"]: print("MISMATCH", tokf, repr(r["text"]), out.strip(), r["ids"])
    print(f"--tokenizer {tokf}: {ok}/{n}")
    assert n > 0 and ok == n
PY
