# kb_bench_gen.bash — sourced by bench/kb_bench.sh and bench/kb_inc_bench.sh
# (run from the repository root). gen COUNT SEED: COUNT data.log lines on
# stdout, words drawn from examples/kb, 12 topics; the same SEED gives the same
# entries in both benchmarks.
gen() {
  python3 - "$1" "$2" <<'PY'
import json, random, sys
n, seed = int(sys.argv[1]), int(sys.argv[2]); r = random.Random(seed)
vocab = [w.strip() for w in open("examples/kb/data.log").read().replace('"', ' ').replace(',', ' ').split() if w.isalpha()]
topics = ["t%02d" % i for i in range(12)]
out = []
for i in range(n):
    words = [r.choice(vocab) for _ in range(r.randint(10, 60))]
    out.append(json.dumps({"topic": r.choice(topics), "title": " ".join(words[:4]), "text": " ".join(words)}))
    if len(out) == 10000: print("\n".join(out)); out = []
if out: print("\n".join(out))
PY
}
