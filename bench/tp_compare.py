#!/usr/bin/env python3
"""tp_compare.py — greedy runs of one model at several tensor-parallel sizes,
compared with the one-GPU run: the same ids, the top logit's difference at
each step while the ids agree, and where they part, whether the one-GPU top
two were a near-tie there.

    python3 bench/tp_compare.py ONE.json TP2.json [TP4.json ...]

Each file is `helix-bg generate --json --top2 --temp 0` output. Prints one
line per file; exits 1 when a run parts from the one-GPU run anywhere but at a
near-tie: where the one-GPU top two are closer than twice the largest change
of a top logit seen while the runs agreed (the size of the rounding
differences between the two runs), or closer than 1e-3 of the top logit."""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    ref = load(sys.argv[1])
    bad = 0
    for path in sys.argv[2:]:
        run = load(path)
        a, b = ref["generated_ids"], run["generated_ids"]
        n = min(len(a), len(b))
        same = 0
        while same < n and a[same] == b[same]:
            same += 1
        worst = 0.0
        for s in range(same):
            ta, tb = ref["top2"][s], run["top2"][s]
            worst = max(worst, abs(ta[1] - tb[1]), abs(ta[3] - tb[3]) if ta[2] == tb[2] else 0.0)
        line = f"{path}: {same}/{n} greedy ids the same as {sys.argv[1]}; largest top-logit difference {worst:.3g}"
        if same < n:
            t = ref["top2"][same]
            gap = t[1] - t[3]
            tie = gap < 2 * worst or gap < 1e-3 * max(abs(t[1]), 1.0)
            line += f"; parted at step {same}: one-GPU top two {t[1]:.6g} / {t[3]:.6g}, gap {gap:.3g}"
            line += " (a near-tie: below twice the largest difference)" if tie else ", NOT a near-tie"
            bad += not tie
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
