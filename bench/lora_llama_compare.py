#!/usr/bin/env python3
"""lora_llama_compare.py — helix's greedy ids with LoRA adapters against llama.cpp's `--lora` on a real
model (SmolLM2-135M-Instruct Q4_1 from bench/real_models_fetch.sh), on the CPU.

Adapters (made under --work, never in the repository):
  peft      tests/lora_make_adapter.py: a PEFT folder (r 8, alpha 16, uniform random A and B on the 7
            llama projections of every layer, Hugging Face row order), loaded by helix as the folder
  peft2     the same with r 4, alpha 8, seed 2 (rank 4: llama.cpp's B product leaves tinyBLAS, k % 8)
  peft.hx   peft converted by `helix-bg lora-convert` (helix's GGUF writer)
  peft.cpp  peft (and peft2.cpp) converted by llama.cpp's own convert_lora_to_gguf.py (--convert; its
            python needs torch and transformers), which permutes llama's Q/K rows of B itself
  embd      embed_tokens only (PEFT's lora_embedding_A/B; r 8, alpha 16, seed 3)
  head      lm_head only (r 8, alpha 16, seed 4, B amplitude 0.1)
  full      the 7 projections of every layer, embed_tokens and lm_head (r 16, alpha 32, seed 5)
  full.hx   full converted by `helix-bg lora-convert` (token_embd.weight.lora_a written transposed,
            ne [r, n_vocab], as llama.cpp reads it)
  ft        --finetuned FILE: an adapter that `helix-bg finetune` trained (optional)
The model ties its output head to token_embd. llama.cpp then runs the head on a copy of token_embd.weight
under that name, so it applies a token_embd.weight adapter to the head as an ordinary pair, which does
not fit, and aborts; an output.weight adapter has no base tensor. embd, head and full therefore run on
an untied copy (tests/lora_untie_model.py: output.weight = token_embd.weight's bytes; the same function,
its control case "untied" must equal "base").
Cases (llama.cpp gets the .cpp files, or the .hx ones without --convert; helix the form on the left):
  base (no adapter, the control); peft at scale 1 and 0.5; peft.hx (helix's GGUF on both sides);
  peft2@0.5 + peft@1 together; ft@1; ft@1 + peft@0.5; on the untied copy: untied (no adapter), embd@1,
  head@1, full@1, full@0.5, full.hx@1.
With two adapters llama.cpp adds their deltas in the order of its std::unordered_map keyed by adapter
pointer (llama_set_adapters_lora), which libstdc++ iterates in reverse insertion order for two keys;
helix adds them in the order given, so helix is given them reversed (the sums differ by an ulp
otherwise, enough to change greedy ids within a few steps: bench/RESULTS.md).
For each case and prompt: `helix-bg generate --prompt-ids ... --json --top2 --lora ...` against
bench/llama_greedy.c (--lora / --lora-scaled) on the same prompt ids, N greedy steps; at a divergence
both engines' top-2 logits (a near-tie or not). Prints a markdown table. --update writes
tests/data/lora_llama_ref.json (the adapters' recipes and sha256, llama.cpp's ids), which
tests/lora_llama.sh checks helix against without llama.cpp.

  python3 bench/lora_llama_compare.py --helix build/helix-bg --peer ~/.cache/helix/peer/llama_greedy \
      [--convert /tmp/llama-full/convert_lora_to_gguf.py --convert-python /tmp/hf-venv/bin/python] \
      [--finetuned topic.gguf] [--update]
"""
import argparse, hashlib, json, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from real_models_compare import chat_text, run_json, sha256  # noqa: E402

N = 64
MODEL = os.path.expanduser(os.path.join(os.environ.get("HELIX_REAL_DIR", "~/.cache/helix/real"),
                                        "SmolLM2-135M-Instruct.Q4_1.gguf"))
PROMPTS = [("What is the capital of France?", True), ("Write a haiku about the sea.", True),
           ("Explain in two sentences what a hash table is.", True), ("Once upon a time, in a small village,", False)]
# the PEFT adapters' recipes (tests/lora_make_adapter.py); dims are read from the model
RECIPES = {"peft": {"rank": 8, "alpha": 16, "seed": 1, "a_amp": 1.0, "b_amp": 0.02},
           "peft2": {"rank": 4, "alpha": 8, "seed": 2, "a_amp": 1.0, "b_amp": 0.02}}
PROJ = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
# adapters on the token embedding and the output head (need the untied copy of the model)
RECIPES_UNTIED = {"embd": {"rank": 8, "alpha": 16, "seed": 3, "a_amp": 1.0, "b_amp": 0.02, "targets": "embed_tokens"},
                  "head": {"rank": 8, "alpha": 16, "seed": 4, "a_amp": 1.0, "b_amp": 0.02, "head_b_amp": 0.1,
                           "targets": "lm_head"},
                  "full": {"rank": 16, "alpha": 32, "seed": 5, "a_amp": 1.0, "b_amp": 0.01, "head_b_amp": 0.05,
                           "targets": PROJ + ",embed_tokens,lm_head"}}
HERE = os.path.dirname(os.path.abspath(__file__))


def model_dims(path):
    import gguf
    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    def kv(k):
        f = r.fields[arch + "." + k]
        return int(f.parts[f.data[0]][0])
    return {"layers": kv("block_count"), "embd": kv("embedding_length"), "ff": kv("feed_forward_length"),
            "heads": kv("attention.head_count"), "kv_heads": kv("attention.head_count_kv"),
            "vocab": len(r.fields["tokenizer.ggml.tokens"].data)}, arch, r


def make_peft(out, dims, recipe):
    cmd = [sys.executable, os.path.join(HERE, "..", "tests", "lora_make_adapter.py"), out]
    if "targets" not in recipe:  # the projections only: lora_make_adapter.py needs no vocabulary
        dims = {k: v for k, v in dims.items() if k != "vocab"}
    for k, v in list(dims.items()) + list(recipe.items()):
        cmd += ["--" + k.replace("_", "-"), str(v)]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def hf_config(path, reader, dims, out, tied):
    """config.json for convert_lora_to_gguf.py --base (it reads only the config, no weights)."""
    def f(k):
        x = reader.fields.get("llama." + k)
        return None if x is None else x.parts[x.data[0]][0].item()
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dims["embd"],
           "intermediate_size": dims["ff"], "num_hidden_layers": dims["layers"],
           "num_attention_heads": dims["heads"], "num_key_value_heads": dims["kv_heads"],
           "rms_norm_eps": f("attention.layer_norm_rms_epsilon"), "rope_theta": f("rope.freq_base"),
           "max_position_embeddings": f("context_length"), "vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data),
           "tie_word_embeddings": tied,
           "hidden_act": "silu", "torch_dtype": "float32"}
    os.makedirs(out, exist_ok=True)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)


def lora_args(spec, flag_one="--lora", flag_scaled="--lora-scaled"):
    """spec: [(path, scale)] -> command-line flags (shared by helix and llama_greedy)."""
    args = []
    for p, s in spec:
        args += [flag_one, p] if s == 1.0 else [flag_scaled, p, repr(s)]
    return args


def compare(ga, gb, ta, tb):
    """First divergence (None: equal), ids equal, max |top-1 logit diff| over the equal steps."""
    d = next((i for i in range(min(len(ga), len(gb))) if ga[i] != gb[i]), None)
    if d is None and len(ga) != len(gb):
        d = min(len(ga), len(gb))
    n_eq = d if d is not None else len(ga)
    dmax = max((abs(x[1] - y[1]) for x, y in zip(ta[:n_eq], tb[:n_eq])), default=0.0)
    return d, n_eq, dmax


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--helix", default="build/helix-bg")
    ap.add_argument("--peer", required=True, help="llama_greedy built from bench/llama_greedy.c")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--work", default=os.path.expanduser("~/.cache/helix/lora-cmp"))
    ap.add_argument("--convert", help="llama.cpp's convert_lora_to_gguf.py")
    ap.add_argument("--convert-python", default=sys.executable)
    ap.add_argument("--finetuned", help="a GGUF adapter from helix-bg finetune on the same model")
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--cases", help="comma-separated case names to run (default all); with --update the "
                    "recorded runs of the other cases are kept")
    ap.add_argument("-n", type=int, default=N)
    ap.add_argument("-t", default="2")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        sys.exit(f"{a.model} absent: run bench/real_models_fetch.sh")
    dims, arch, reader = model_dims(a.model)
    tied = "output.weight" not in [t.name for t in reader.tensors]
    os.makedirs(a.work, exist_ok=True)
    models = {"base": a.model}
    untied_sha = None
    if tied:
        models["untied"] = os.path.join(a.work, "untied.gguf")
        untied_sha = subprocess.run([sys.executable, os.path.join(HERE, "..", "tests", "lora_untie_model.py"), a.model,
                                     models["untied"]], check=True, capture_output=True, text=True).stdout.strip()
    else:
        models["untied"] = a.model
    recipes = dict(RECIPES, **RECIPES_UNTIED)
    on = {n: "base" for n in RECIPES}  # the model each adapter is made for
    on.update({n: "untied" for n in RECIPES_UNTIED})
    path, digest = {}, {}
    for name, recipe in recipes.items():
        path[name] = os.path.join(a.work, name)
        digest[name] = make_peft(path[name], dims, recipe)
    converted = {"peft.hx": "peft", "full.hx": "full"}  # helix's GGUF, given to both engines
    for name, src in converted.items():
        path[name] = os.path.join(a.work, name + ".gguf")
        subprocess.run([a.helix, "lora-convert", path[src], "-m", models[on[src]], "-o", path[name]], check=True,
                       capture_output=True)
    peer = {}  # llama.cpp's file for each PEFT folder
    for name in recipes:
        if a.convert:
            base = os.path.join(a.work, "base-config-" + on[name])
            hf_config(a.model, reader, dims, base, tied and on[name] == "base")
            peer[name] = os.path.join(a.work, name + ".cpp.gguf")
            r = subprocess.run([a.convert_python, a.convert, "--base", base, "--outtype", "f32", "--outfile", peer[name],
                                path[name]], capture_output=True, text=True)
            if r.returncode:
                sys.exit("convert_lora_to_gguf.py failed:\n" + r.stderr[-3000:])
        else:
            peer[name] = os.path.join(a.work, name + ".hx.gguf")
            subprocess.run([a.helix, "lora-convert", path[name], "-m", models[on[name]], "-o", peer[name]], check=True,
                           capture_output=True)

    # (name, helix adapters, llama.cpp adapters); an adapter is (name, scale); two adapters: reversed for helix
    # (name, model, helix adapters, llama.cpp adapters)
    cases = [("base", "base", [], []),
             ("peft@1", "base", [("peft", 1.0)], [("peft", 1.0)]),
             ("peft@0.5", "base", [("peft", 0.5)], [("peft", 0.5)]),
             ("peft.hx@1", "base", [("peft.hx", 1.0)], [("peft.hx", 1.0)]),
             ("peft2@0.5+peft@1", "base", [("peft", 1.0), ("peft2", 0.5)], [("peft2", 0.5), ("peft", 1.0)])]
    if a.finetuned:
        path["ft"] = peer["ft"] = a.finetuned
        cases += [("ft@1", "base", [("ft", 1.0)], [("ft", 1.0)]),
                  ("ft@1+peft@0.5", "base", [("peft", 0.5), ("ft", 1.0)], [("ft", 1.0), ("peft", 0.5)])]
    cases += [("untied", "untied", [], []),
              ("embd@1", "untied", [("embd", 1.0)], [("embd", 1.0)]),
              ("head@1", "untied", [("head", 1.0)], [("head", 1.0)]),
              ("full@1", "untied", [("full", 1.0)], [("full", 1.0)]),
              ("full@0.5", "untied", [("full", 0.5)], [("full", 0.5)]),
              ("full.hx@1", "untied", [("full.hx", 1.0)], [("full.hx", 1.0)])]
    for name in converted:
        peer[name] = path[name]
    if a.cases:
        want = a.cases.split(",")
        unknown = set(want) - {c[0] for c in cases}
        if unknown:
            sys.exit("--cases: no case " + ", ".join(sorted(unknown)))
        cases = [c for c in cases if c[0] in want]
    print("adapters: " + ", ".join(f"{n} (sha256 {digest[n][:16]}...; llama.cpp gets {os.path.basename(peer[n])})"
                                   for n in recipes))
    print("| case | prompt | prompt tokens | greedy ids equal (of %d) | max abs top-1 logit diff | first divergence: llama.cpp top-2 / helix top-2 |" % a.n)
    print("|---|---|---|---|---|---|")
    out_cases, bad = [], 0
    for p, chat in PROMPTS:
        text = chat_text(a.model, p) if chat else p
        pids = run_json([a.peer, "-m", a.model, "-p", text, "--tokenize"])["prompt_ids"]
        ids = ",".join(map(str, pids))
        for name, mk, hx_spec, cpp_spec in cases:
            rl = run_json([a.peer, "-m", models[mk], "--ids", ids, "-n", str(a.n), "-t", a.t] +
                          lora_args([(peer[n], sc) for n, sc in cpp_spec]))
            rh = run_json([a.helix, "generate", "-m", models[mk], "--prompt-ids", ids, "-n", str(a.n), "--json", "--top2",
                           "-t", a.t] + lora_args([(path[n], sc) for n, sc in hx_spec]))
            ga, gb = rl["generated_ids"], rh["generated_ids"]
            d, n_eq, dmax = compare(ga, gb, rl["top2"], rh["top2"])
            fmt = lambda t: "%d %.4f / %d %.4f (gap %.4f)" % (t[0], t[1], t[2], t[3], t[1] - t[3]) if t else "eos"
            div = "none" if d is None else "step %d: %s vs %s" % (
                d, fmt(rl["top2"][d] if d < len(rl["top2"]) else None), fmt(rh["top2"][d] if d < len(rh["top2"]) else None))
            bad += d is not None
            print(f"| {name} | {(p if len(p) < 40 else p[:36] + '...')!r} | {len(pids)} | {n_eq}/{len(ga)} | {dmax:.1e} | {div} |",
                  flush=True)
            if name.startswith("ft"):
                continue  # the trained adapter is not rebuilt by the test
            c = {"case": name, "prompt": p, "chat": chat, "prompt_ids": pids, "generated_ids": ga,
                 "llama_top2": [[t[0], round(t[1], 4), t[2], round(t[3], 4)] for t in rl["top2"]], "helix_match": n_eq,
                 "lora": [list(x) for x in hx_spec]}
            if mk != "base":
                c["model"] = mk
            out_cases.append(c)
    if a.update:
        if a.cases:  # the other cases' recorded runs, in their order, then these
            ran = {c["case"] for c in out_cases}
            old = json.load(open("tests/data/lora_llama_ref.json"))["cases"]
            out_cases = [c for c in old if c["case"] not in ran] + out_cases
        with open("tests/data/lora_llama_ref.json", "w") as f:
            json.dump({"source": "llama.cpp (bench/llama_greedy.c --lora, adapters from %s), greedy, %d tokens, f16 KV cache"
                                 % ("convert_lora_to_gguf.py" if a.convert else "helix-bg lora-convert", a.n),
                       "model": os.path.basename(a.model), "model_sha256": sha256(a.model),
                       "adapters": {n: {"recipe": dict(r, **{k: v for k, v in dims.items() if k != "vocab" or "targets" in r}),
                                        "sha256": digest[n], **({"model": "untied"} if on[n] == "untied" else {})}
                                    for n, r in recipes.items()},
                       "converted": {n: {"from": src, "model": on[src]} for n, src in converted.items()},
                       **({"untied": {"how": "tests/lora_untie_model.py", "sha256": untied_sha}} if untied_sha else {}),
                       "cases": out_cases}, f, indent=1)
            f.write("\n")
        print("wrote tests/data/lora_llama_ref.json", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
