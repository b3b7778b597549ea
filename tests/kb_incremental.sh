#!/usr/bin/env bash
# Incremental passes equal full passes. A KB of 3,000 entries (8 topics of
# many entries, ~600 single-entry topics, exact duplicates for ties) gets 12
# rounds of appends: new entries (new single-entry topics, entries joining a
# single-entry topic, duplicates of old texts), deletes (of the entries the
# report names, so the kept lists run short; of random entries; of a
# single-entry topic's entry; down to one entry in a topic, which forces a
# full comparison), malformed and blank lines, a partial last line. After each
# round, one-shot on the KB (incremental where it can be) must write the same
# insights.json, byte for byte, as one-shot --full on a fresh copy of data.log;
# most rounds must really have been incremental. Then: a rewritten log (same
# size) and a damaged insights.state each give a full pass and the right result.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export BIN tmp
python3 - <<'PY'
import json, os, random, subprocess, sys
BIN, tmp = os.environ["BIN"], os.environ["tmp"]
kb, ref = os.path.join(tmp, "kb"), os.path.join(tmp, "ref")
os.makedirs(kb); os.makedirs(ref)
log = os.path.join(kb, "data.log")
r = random.Random(7)
words = ("cache index replica kernel token pool queue socket lock shard disk backup alert deploy "
         "latency quorum lease vacuum compaction snapshot rollout canary").split()
texts = []
def entry(topic, text=None):
    if text is None:
        text = " ".join(r.choice(words) for _ in range(r.randint(4, 14)))
    texts.append(text)
    return json.dumps({"topic": topic, "title": text[:20], "text": text}) + "\n"
def offsets():
    out, off = [], 0
    with open(log, "rb") as f:
        for line in f.read().split(b"\n")[:-1]:
            try:
                o = json.loads(line)
                if "text" in o: out.append(off)
            except Exception:
                pass
            off += len(line) + 1
    return out
def run(*args):
    p = subprocess.run([BIN, "one-shot", *args], capture_output=True, text=True)
    if p.returncode: sys.exit("FAIL: one-shot %s: %s" % (" ".join(args), p.stderr))
    return p.stdout
def check(name, want_incremental=None):
    out = run(kb)
    inc = "incremental pairs" in out
    with open(log, "rb") as f, open(os.path.join(ref, "data.log"), "wb") as g: g.write(f.read())
    for x in ("embeddings.bin", "insights.state"):
        try: os.unlink(os.path.join(ref, x))
        except FileNotFoundError: pass
    run(ref, "--full", "-q")
    a = open(os.path.join(kb, "insights.json")).read(); b = open(os.path.join(ref, "insights.json")).read()
    if a != b:
        open(os.path.join(tmp, "a.json"), "w").write(a); open(os.path.join(tmp, "b.json"), "w").write(b)
        sys.exit("FAIL: %s: the %s pass differs from a full pass:\n%s" % (name, "incremental" if inc else "full",
                 subprocess.run(["diff", os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")], capture_output=True, text=True).stdout[:3000]))
    if want_incremental is not None and inc != want_incremental:
        sys.exit("FAIL: %s: expected a%s pass: %s" % (name, "n incremental" if want_incremental else " full", out[-300:]))
    return inc
with open(log, "w") as f:
    for i in range(3000):
        f.write(entry("t%d" % (i % 8)) if r.random() < 0.8 else entry("s%d" % i))
check("first pass", False)
n_inc = 0
for rnd in range(12):
    with open(log, "a") as f:
        offs = offsets()
        rep = json.load(open(os.path.join(kb, "insights.json")))
        for i in range(100):
            k = r.random()
            if k < 0.5: f.write(entry("t%d" % r.randrange(8)))
            elif k < 0.7: f.write(entry("n%d_%d" % (rnd, i)))                   # a new single-entry topic
            elif k < 0.8: f.write(entry("s%d" % r.randrange(3000)))              # may join a single-entry topic
            else: f.write(entry("t%d" % r.randrange(8), r.choice(texts)))        # an exact duplicate: ties
        if rnd % 3 == 1:  # delete what the report names: the kept lists shrink
            for d in rep["near_duplicates"][: 10 + 5 * rnd] + rep["cross_links"][:20]:
                f.write(json.dumps({"delete": d["a"]}) + "\n")
        for _ in range(15): f.write(json.dumps({"delete": r.choice(offs)}) + "\n")
        f.write("not json\n\n{\"topic\": \"x\"}\n")
        if rnd == 7:  # a topic of two entries, in round 8 down to one: its pairs were never kept
            f.write(entry("pair7")); f.write(entry("pair7"))
        if rnd == 8:
            f.write(json.dumps({"delete": pair7[0]}) + "\n")
        if rnd == 10:  # half the entries go: the kept lists run short
            for o in r.sample(offs, len(offs) // 2): f.write(json.dumps({"delete": o}) + "\n")
    if rnd == 5:
        with open(log, "a") as f: f.write('{"topic": "t1", "text": "half a li')  # partial last line
    inc = check("round %d" % rnd, False if rnd == 8 else None)
    n_inc += inc
    if rnd == 7:
        pair7 = [o for o in offsets() if b'"pair7"' in open(log, "rb").read()[o:o + 40]]
    if rnd == 6:
        with open(log, "a") as f: f.write('ne"}\n')
if not 8 <= n_inc <= 11: sys.exit("FAIL: %d of 12 rounds were incremental (want 8-11: round 8 must be full)" % n_inc)
# a rewrite of the same size before the kept offset: caught by the marks, full pass
data = open(log, "rb").read()
i = data.index(b"cache")
open(log, "wb").write(data[:i] + b"CACHE" + data[i + 5:])
check("rewritten log", False)
# a damaged state: warned about, full pass
st = os.path.join(kb, "insights.state")
b = bytearray(open(st, "rb").read()); b[len(b) // 2] ^= 1; open(st, "wb").write(b)
with open(log, "a") as f: f.write(entry("t3"))
check("damaged state", False)
check("after the damage", None)
print("%d of 12 rounds incremental, all equal to full passes" % n_inc)
PY
echo "1 passed, 0 failed"
