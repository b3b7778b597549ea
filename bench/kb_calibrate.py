#!/usr/bin/env python3
"""Calibrates helix-bg's report thresholds on the labelled sample KB.

  python3 bench/kb_calibrate.py [--bin build/helix-bg] [--embed-model DIR] [--json]

Runs `helix-bg one-shot --no-think` on a copy of examples/kb, reads the vectors
back from embeddings.bin (exactly what the pass compares) and scores every pair
of live entries against bench/kb_labels.json (written by examples/kb/make_kb.py):

  near-duplicates  positives: pairs inside a labelled near-duplicate cluster;
                   negatives: every other pair (links included).
  cross-links      among pairs of different topics that are not near-duplicates
                   and score at most the near-duplicate threshold: positives are
                   pairs of a labelled link group, negatives the rest (pairs with
                   a labelled misfiled entry are left out: they are its symptom).
  misfiled         the centroid classifier's probability (the pass's insights.json
                   after the think stage) for the labelled misfiled entries against
                   the best of the others.

For each kind it prints precision and recall at thresholds around the pick.
Near-duplicates: the threshold of the best F1 (a merge list should be complete
and right). Cross-links: the best F0.5, precision weighted twice recall, since
a person reads every suggested link and a missed one costs little. Ties: the
middle of the widest tied gap between observed similarities, so the cut sits as
far from any labelled pair as the data allows. Alongside, a two-fold check: thresholds picked on half the
topics, scored on the pairs of the other half, to show how far they carry.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def read_cache(path):
    b = open(path, "rb").read()
    magic, ver, count, dim, fpl = struct.unpack_from("<4sIIII", b, 0)
    if magic != b"HXEC" or ver != 3:
        sys.exit("%s: not an embeddings.bin v3" % path)
    p = 20 + fpl
    fp = b[20:p].decode()
    vecs = {}
    for _ in range(count):
        off, _h = struct.unpack_from("<QQ", b, p)
        p += 16
        vecs[off] = struct.unpack_from("<%df" % dim, b, p)
        p += 4 * dim
    return fp, vecs


def read_log(path):
    ents, off = {}, 0
    for line in open(path, "rb").read().split(b"\n"):
        try:
            o = json.loads(line)
            if "title" in o:
                ents[off] = o
            if "delete" in o:
                ents.pop(o["delete"], None)
        except ValueError:
            pass
        off += len(line) + 1
    return ents


def all_pairs(keys, vecs):
    try:
        import numpy as np
        m = np.array([vecs[k] for k in keys], dtype=np.float64)
        s = m @ m.T
        return {(keys[i], keys[j]): float(s[i, j]) for i in range(len(keys)) for j in range(i + 1, len(keys))}
    except ImportError:
        out = {}
        for i in range(len(keys)):
            a = vecs[keys[i]]
            for j in range(i + 1, len(keys)):
                out[(keys[i], keys[j])] = sum(x * y for x, y in zip(a, vecs[keys[j]]))
        return out


def prf(scored, t):
    """scored: [(sim, positive)]; the pairs above t are reported."""
    tp = sum(1 for s, y in scored if s > t and y)
    rep = sum(1 for s, _ in scored if s > t)
    pos = sum(1 for _, y in scored if y)
    p = tp / rep if rep else 1.0
    r = tp / pos if pos else 1.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f, rep


def pick(scored, lo=0.0, hi=1.0, beta=1.0):
    """The threshold of the best F-beta: cuts between consecutive observed sims."""
    # one sweep from the top: after passing a similarity value, everything at
    # or above it is reported; the cut lies in the gap below it
    pos = sum(1 for _, y in scored if y)
    srt = sorted(((s, y) for s, y in scored if lo <= s <= hi), reverse=True)
    above_tp = sum(1 for s, y in scored if s > hi and y)
    above_n = sum(1 for s, _ in scored if s > hi)
    best, tp, n, i = None, above_tp, above_n, 0
    prev = hi
    while True:
        nxt = srt[i][0] if i < len(srt) else lo
        if nxt < prev:  # a gap (nxt, prev): the reported set is what passed so far
            p = tp / n if n else 1.0
            r = tp / pos if pos else 1.0
            b2 = beta * beta
            f = (1 + b2) * p * r / (b2 * p + r) if p + r else 0.0
            key = (round(f, 9), prev - nxt)
            if best is None or key > best[0]:
                best = (key, nxt, prev)
        if i == len(srt):
            break
        s = srt[i][0]
        while i < len(srt) and srt[i][0] == s:
            tp += srt[i][1]
            n += 1
            i += 1
        prev = s
    _, a, b = best
    t = (a + b) / 2
    for nd in (2, 3, 4):  # a round number inside the gap when there is one
        r = round(t, nd)
        if a < r < b:
            return r
    return t


def run(args, model, workdir):
    kb = os.path.join(workdir, "kb")
    os.makedirs(kb)
    shutil.copy(os.path.join(ROOT, "examples", "kb", "data.log"), kb)
    cmd = [args.bin, "one-shot", kb, "-q"] + (["--embed-model", model] if model else [])
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    fp, vecs = read_cache(os.path.join(kb, "embeddings.bin"))
    ins = json.load(open(os.path.join(kb, "insights.json")))
    return fp, vecs, read_log(os.path.join(kb, "data.log")), ins


def calibrate(fp, vecs, ents, ins, labels, topics_subset=None):
    by_title = {e["title"]: off for off, e in ents.items()}
    keys = sorted(k for k in vecs if k in ents and (topics_subset is None or ents[k]["topic"] in topics_subset))
    dup_pairs, link_pairs = set(), set()
    for g in labels["near_duplicates"]:
        offs = sorted(by_title[t] for t in g)
        dup_pairs |= {(a, b) for i, a in enumerate(offs) for b in offs[i + 1:]}
    for g in labels["links"]:
        offs = sorted(by_title[t] for t in g)
        link_pairs |= {(a, b) for i, a in enumerate(offs) for b in offs[i + 1:]
                       if ents[a]["topic"] != ents[b]["topic"]}
    sims = all_pairs(keys, vecs)
    dscored = [(s, p in dup_pairs) for p, s in sims.items()]
    dup_t = pick(dscored, 0.0, 1.0)
    # a misfiled entry's pairs with its true topic look like cross-links but
    # are a misfiling signal: neither positive nor negative for links
    misf = {by_title[m["title"]] for m in labels["misfiled"]}
    lscored = [(s, p in link_pairs) for p, s in sims.items()
               if ents[p[0]]["topic"] != ents[p[1]]["topic"] and p not in dup_pairs and s <= dup_t
               and p[0] not in misf and p[1] not in misf]
    link_t = pick(lscored, 0.0, dup_t, beta=0.5)
    return {"fingerprint": fp, "pairs": len(sims), "dup": dup_t, "link_low": link_t,
            "dscored": dscored, "lscored": lscored, "sims": sims, "dup_pairs": dup_pairs, "link_pairs": link_pairs}


def report(name, c, ents, ins, labels, out):
    w = out.write
    w("\n## %s (%s)\n" % (name, c["fingerprint"]))
    w("%d pairs of %d live entries; %d near-duplicate pairs, %d cross-topic link pairs labelled\n" %
      (c["pairs"], len(ents), len(c["dup_pairs"]), len(c["link_pairs"])))
    for kind, scored, t in (("near-duplicates (sim > t), best F1", c["dscored"], c["dup"]),
                            ("cross-links (t < sim <= dup, other topics), best F0.5", c["lscored"], c["link_low"])):
        pos = sorted((s for s, y in scored if y), reverse=True)
        neg = sorted((s for s, y in scored if not y), reverse=True)
        w("\n%s: positives %.3f..%.3f (median %.3f), best negatives %s\n" %
          (kind, pos[-1], pos[0], pos[len(pos) // 2], " ".join("%.3f" % x for x in neg[:5])))
        w("  %-6s %9s %7s %5s %8s\n" % ("t", "precision", "recall", "F1", "reported"))
        grid = sorted({round(x / 100, 2) for x in range(int(t * 100) - 12, int(t * 100) + 13, 3)} | {t})
        for g in grid:
            if 0 < g < 1:
                p, r, f, n = prf(scored, g)
                w("  %-6s %9.3f %7.3f %5.3f %8d%s\n" % (("%.4g" % g), p, r, f, n, "   <- picked" if g == t else ""))
    # misfiled: the centroid classifier's probabilities from the pass
    if "classifications" in ins:
        mis = {m["title"] for m in labels["misfiled"]}
        prob = {}
        for c2 in ins["classifications"]:
            e = ents.get(c2["id"])
            if e and c2["predicted"] != c2["topic"]:
                prob[e["title"]] = c2["probability"]
        lab = sorted(((prob.get(t, 0.0), t) for t in mis), reverse=True)
        oth = sorted((p for t, p in prob.items() if t not in mis), reverse=True)
        w("\nmisfiled (centroid, predicted elsewhere): labelled %s; others' best %s\n" %
          (" ".join("%.3f" % p for p, _ in lab), " ".join("%.3f" % p for p in oth[:6])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "helix-bg"))
    ap.add_argument("--embed-model", action="append", default=[],
                    help="a BERT model (HF folder or .gguf); repeat for several; the lexical embedder always runs")
    ap.add_argument("--json", action="store_true", help="print the picked thresholds as JSON lines")
    args = ap.parse_args()
    labels = json.load(open(os.path.join(ROOT, "bench", "kb_labels.json")))
    out = sys.stdout
    for model in [None] + args.embed_model:
        with tempfile.TemporaryDirectory() as d:
            fp, vecs, ents, ins = run(args, model, d)
        c = calibrate(fp, vecs, ents, ins, labels)
        topics = sorted({e["topic"] for e in ents.values()})
        folds = [set(topics[0::2]), set(topics[1::2])]
        cv = []
        for k in (0, 1):
            tr = calibrate(fp, vecs, ents, ins, labels, folds[k])
            te = calibrate(fp, vecs, ents, ins, labels, folds[1 - k])
            dp = prf(te["dscored"], tr["dup"])
            lsc = [(s, y) for (s, y) in te["lscored"]]
            lp = prf([(s, y) for s, y in lsc if s <= tr["dup"]], tr["link_low"])
            cv.append((tr["dup"], dp, tr["link_low"], lp))
        if args.json:
            print(json.dumps({"embedder": fp, "dup": c["dup"], "link_low": c["link_low"],
                              "twofold": [[x[0], x[1][:3], x[2], x[3][:3]] for x in cv]}))
            continue
        report(model or "lexical-384", c, ents, ins, labels, out)
        out.write("\npicked: --dup %s --link-low %s --link-high %s\n" % (c["dup"], c["link_low"], c["dup"]))
        for k, (dt, dp, lt, lp) in enumerate(cv):
            out.write("two-fold %d: dup %.4g on half the topics -> P %.2f R %.2f on the other half; "
                      "link-low %.4g -> P %.2f R %.2f\n" % (k, dt, dp[0], dp[1], lt, lp[0], lp[1]))


if __name__ == "__main__":
    main()
