#!/usr/bin/env bash
# lora_llama.sh — greedy ids with a LoRA adapter on a real model (SmolLM2-135M-Instruct Q4_1 from
# bench/real_models_fetch.sh) against llama.cpp's `--lora`, recorded in tests/data/lora_llama_ref.json by
# bench/lora_llama_compare.py --update. The adapters are rebuilt here, byte for byte, by
# tests/lora_make_adapter.py from the recipes in the reference (their sha256 is checked): PEFT folders
# (r 8 and r 4, random A and B on the 7 projections of all 30 layers; on embed_tokens alone, on lm_head
# alone, and r 16 on all of them) that helix loads as folders, and two converted by
# `helix-bg lora-convert` (GGUF; token_embd's lora_a transposed as llama.cpp keeps it). The adapters on
# the embedding and the head run on an untied copy of the model (tests/lora_untie_model.py, sha256
# checked: llama.cpp cannot run them on the tied original). For every case (no adapter, the r 8 folder
# at scale 1 and 0.5, its GGUF at 1, both folders at once; on the untied copy: no adapter, embedding,
# head, all at 1 and 0.5, the GGUF of all at 1) and prompt, `helix-bg generate --prompt-ids` must
# reproduce llama.cpp's ids for at least the recorded number of steps (all of them unless a divergence
# at a near-tie is recorded, with llama.cpp's top-2 logits), and its top-1 logit must be llama.cpp's
# (recorded to 4 decimals) within 2e-3 at every equal step: the engines agree bit for bit, and an ulp
# off early in the pass can move the logits by 0.1 or more while the ids still agree.
# With HX_LLAMA_GREEDY=PATH (bench/llama_greedy.c built against llama.cpp, see
# bench/lora_llama_compare.sh) it also runs the comparison live and needs every case equal.
# Skips (77), saying why, without python3 or the model (as on CI).
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
REAL=${HELIX_REAL_DIR:-$HOME/.cache/helix/real}
REF=tests/data/lora_llama_ref.json
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
work=$(mktemp -d /tmp/hx_lora_llama.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$BIN" "$REAL" "$REF" "$work" <<'PY'
import hashlib, json, os, subprocess, sys
binp, real, ref, work = sys.argv[1:5]
R = json.load(open(ref))
model = os.path.join(real, R["model"])
if not os.path.exists(model):
    print(f"SKIP: {model} absent (bash bench/real_models_fetch.sh fetches it)"); sys.exit(77)
h = hashlib.sha256()
with open(model, "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""): h.update(b)
if h.hexdigest() != R["model_sha256"]:
    print(f"SKIP: {model} has sha256 {h.hexdigest()}, the reference's is {R['model_sha256']}"); sys.exit(77)
models = {"base": model}
if "untied" in R:  # the untied copy, rebuilt and checked
    models["untied"] = os.path.join(work, "untied.gguf")
    digest = subprocess.run([sys.executable, "tests/lora_untie_model.py", model, models["untied"]], check=True,
                            capture_output=True, text=True).stdout.strip()
    if digest != R["untied"]["sha256"]:
        print(f"FAIL: tests/lora_untie_model.py made a copy with sha256 {digest}, the reference's is {R['untied']['sha256']}")
        sys.exit(1)
# the adapters, from the reference's recipes
paths = {}
for name, ad in R["adapters"].items():
    paths[name] = os.path.join(work, name)
    cmd = [sys.executable, "tests/lora_make_adapter.py", paths[name]]
    for k, v in ad["recipe"].items():
        cmd += ["--" + k.replace("_", "-"), str(v)]
    digest = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()
    if digest != ad["sha256"]:
        print(f"FAIL: tests/lora_make_adapter.py made {name} with sha256 {digest}, the reference's is {ad['sha256']}")
        sys.exit(1)
for name, cv in R.get("converted", {"peft.hx": {"from": "peft", "model": "base"}}).items():
    paths[name] = os.path.join(work, name + ".gguf")
    subprocess.run([binp, "lora-convert", paths[cv["from"]], "-m", models[cv["model"]], "-o", paths[name]], check=True,
                   capture_output=True)
# under the sanitizers (scripts/test.sh sets HX_TEST_SANITIZE): the first prompt, 8 steps
quick = bool(os.environ.get("HX_TEST_SANITIZE"))
bad = ran = 0
for c in R["cases"]:
    if quick and c["prompt"] != R["cases"][0]["prompt"]:
        continue
    want = c["generated_ids"][:8] if quick else c["generated_ids"]
    need = min(c["helix_match"], len(want))
    flags = []
    for name, s in c["lora"]:
        flags += ["--lora", paths[name]] if s == 1.0 else ["--lora-scaled", paths[name], repr(s)]
    n = len(want) if quick or len(want) == 64 else len(want) + 1  # one more: helix must stop at the EOS too
    out = subprocess.run([binp, "generate", "-m", models[c.get("model", "base")], "--prompt-ids", ",".join(map(str, c["prompt_ids"])),
                          "-n", str(n), "--json", "--top2", "-t", "2"] + flags, capture_output=True, text=True,
                         check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    got = res["generated_ids"]
    n_eq = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
    if n_eq == len(want) and len(got) != len(want) and not quick: n_eq -= 1  # helix ran on past llama.cpp's EOS
    dl = max((abs(h[1] - l[1]) for h, l in zip(res["top2"][:n_eq], c["llama_top2"][:n_eq])), default=0.0)
    ok = n_eq >= need and dl <= 2e-3
    ran += 1
    bad += not ok
    note = "" if need == len(c["generated_ids"]) else f" (recorded divergence at step {need}: llama.cpp top-2 {c['llama_top2'][need]})"
    print(f"{'ok ' if ok else 'FAIL'} {c['case']:16s} {c['prompt'][:40]!r}: greedy ids equal for {n_eq}/{len(want)} steps, "
          f"required {need}, top-1 logit within {dl:.1e}{note}")
print(f"lora vs llama.cpp (recorded): {ran - bad}/{ran} cases pass")
sys.exit(1 if bad else 0)
PY
if [ -n "${HX_LLAMA_GREEDY:-}" ]; then
  [ -x "$HX_LLAMA_GREEDY" ] || { echo "FAIL: HX_LLAMA_GREEDY=$HX_LLAMA_GREEDY is not an executable"; exit 1; }
  python3 bench/lora_llama_compare.py --helix "$BIN" --peer "$HX_LLAMA_GREEDY" --work "$work/live" \
    ${HX_LORA_CONVERT:+--convert "$HX_LORA_CONVERT" --convert-python "${HX_LORA_CONVERT_PYTHON:-python3}"}
else
  echo "live comparison not run: HX_LLAMA_GREEDY is not set (bench/lora_llama_compare.sh builds the peer)"
fi
