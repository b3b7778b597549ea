#!/usr/bin/env python3
"""Topic accuracy of helix-bg's classifier on the labelled sample KB.

  python3 bench/kb_classify_eval.py [--bin build/helix-bg] [--embed-model DIR]
                                    [--llm-model M] [--json] [--keep DIR] [-- extra one-shot flags]

Runs `helix-bg one-shot` on a copy of examples/kb and reads insights.json's
`classifications` (each entry's predicted topic: leave-one-out for the
centroid classifier, the model's answer with --llm-model) against
bench/kb_labels.json. An entry's true topic is its filed topic, except for the
4 labelled misfiled notes, whose true topic is where they belong. Prints:
  accuracy         predicted == true topic, over all classified entries
  misfiled flagged labelled misfiled notes in `misfiled` (at the pass's
                   --misfiled threshold, default 0.8) predicted where they
                   belong, and the other entries flagged there
  chance           the largest topic's share (always guessing it)
With an LLM also the fitted weights of its answer and the centroid's, and the
accuracy without the entries whose titles the LLM was shown as examples.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def evaluate(ins, lab, base=None):
    mis = {m["title"]: m["belongs"] for m in lab["misfiled"]}
    log = os.path.join(ROOT, "examples", "kb", "data.log")
    titles, off = {}, 0
    for line in open(log, "rb").read().split(b"\n"):
        try:
            o = json.loads(line)
            if isinstance(o, dict) and "title" in o:
                titles[off] = o["title"]
        except ValueError:
            pass
        off += len(line) + 1
    cls = ins["classifications"]
    right = sum(c["predicted"] == mis.get(titles.get(c["id"]), c["topic"]) for c in cls)
    # the titles the LLM was shown as examples of their topics: those entries
    # are scored apart too (the model saw their titles in every prompt)
    lc = ins.get("llm_classifier") or {}
    shown = set()
    for t in lc.get("topics", []):
        shown.update(x.strip().strip('"') for x in t.get("examples", "").split('"; "') if x)
    rest = [c for c in cls if titles.get(c["id"]) not in shown]
    right_rest = sum(c["predicted"] == mis.get(titles.get(c["id"]), c["topic"]) for c in rest)
    # the centroid baseline on the same entries (base: the pass without the LLM)
    base_rest = None
    if base is not None:
        brest = [c for c in base["classifications"] if titles.get(c["id"]) not in shown]
        base_rest = round(sum(c["predicted"] == mis.get(titles.get(c["id"]), c["topic"]) for c in brest) / len(brest), 4)
    flagged = {m["title"]: m["predicted"] for m in ins["misfiled"]}
    true_flags = sum(flagged.get(t) == b for t, b in mis.items())
    sizes = Counter(c["topic"] for c in cls)
    return {"classifier": ins.get("classifier"), "space": ins.get("centroid_space"),
            "temperature": ins.get("centroid_temperature"), "embedder": ins.get("embedder"),
            "classified": len(cls), "correct": right, "accuracy": round(right / len(cls), 4) if cls else 0,
            "chance": round(max(sizes.values()) / len(cls), 4) if cls else 0,
            "weights": [lc["weight_llm"], lc["weight_centroid"]] if lc else None, "nll": lc.get("nll"),
            "examples": len(cls) - len(rest), "accuracy_others": round(right_rest / len(rest), 4) if rest else 0,
            "centroid_accuracy_others": base_rest,
            "misfiled_labelled": len(mis), "misfiled_found": true_flags,
            "false_flags": len(flagged) - sum(t in mis for t in flagged)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "helix-bg"))
    ap.add_argument("--embed-model")
    ap.add_argument("--llm-model")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--llm-alone", action="store_true",
                    help="the LLM's calibrated answer alone, not combined with the centroid (one-shot --llm-alone)")
    ap.add_argument("--examples", action="store_true",
                    help="show the LLM titles of each topic's most central entries beside its name (--llm-label-examples)")
    ap.add_argument("--keep", metavar="DIR",
                    help="run in DIR (a copy of examples/kb made there when it has no data.log) and keep it: "
                         "its llm.bin answers the next run with the same model and prompts")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    lab = json.load(open(os.path.join(ROOT, "bench", "kb_labels.json")))
    def one_shot(d, llm):
        os.makedirs(d, exist_ok=True)
        if not os.path.exists(os.path.join(d, "data.log")):
            shutil.copy(os.path.join(ROOT, "examples", "kb", "data.log"), d)
        cmd = [a.bin, "one-shot", d, "-q"] + (["--embed-model", a.embed_model] if a.embed_model else []) \
            + (["--llm-model", a.llm_model] if llm else []) + a.extra \
            + (["--llm-alone"] if llm and a.llm_alone else []) + (["--llm-label-examples"] if llm and a.examples else [])
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        return json.load(open(os.path.join(d, "insights.json")))
    with tempfile.TemporaryDirectory() as tmp:
        # with an LLM, the pass without it too (seconds): the baseline on the same entries
        base = one_shot(os.path.join(tmp, "base"), False) if a.llm_model else None
        r = evaluate(one_shot(a.keep or os.path.join(tmp, "kb"), bool(a.llm_model)), lab, base)
    if a.json:
        print(json.dumps(r))
    else:
        print("%s (%s%s) on %s: topic accuracy %.3f (%d/%d; chance %.3f); misfiled flagged %d/%d labelled, %d others"
              % (r["classifier"], r["space"] or "-", ", T=%s" % r["temperature"] if r["temperature"] else "",
                 r["embedder"], r["accuracy"], r["correct"], r["classified"], r["chance"],
                 r["misfiled_found"], r["misfiled_labelled"], r["false_flags"]))
        if r["weights"]:
            print("  weights llm %.3f, centroid %.3f; without the %d entries shown as examples: accuracy %.3f "
                  "(the centroid alone %.3f); NLL of the filed topics: llm %.3f, centroid %.3f, combined %.3f"
                  % (r["weights"][0], r["weights"][1], r["examples"], r["accuracy_others"],
                     r["centroid_accuracy_others"], r["nll"]["llm"], r["nll"]["centroid"], r["nll"]["combined"]))


if __name__ == "__main__":
    sys.exit(main())
