# kb_gen.bash — sourced by the KB tests that need a large generated log
# (kb_allpairs_cpu.sh, kb_allpairs_cuda.sh; not a test itself: ctest runs tests/*.sh).
# kb_gen COUNT SEED: COUNT entries as data.log lines on stdout, words drawn from
# examples/kb (lexical-384 sees real words), 12 topics, every 9th entry a topic
# of its own, every 13th text a repeat of the one before (exact ties).
kb_gen() {
  python3 - "$1" "$2" <<'PY'
import json, random, sys
n, seed = int(sys.argv[1]), int(sys.argv[2]); r = random.Random(seed)
vocab = [w.strip() for w in open("examples/kb/data.log").read().replace('"', ' ').replace(',', ' ').split() if w.isalpha()]
prev = None
for i in range(n):
    words = prev if prev and i % 13 == 0 else [r.choice(vocab) for _ in range(r.randint(10, 60))]
    prev = words
    topic = "s%d_%d" % (seed, i) if i % 9 == 4 else "t%02d" % r.randrange(12)
    print(json.dumps({"topic": topic, "title": " ".join(words[:4]), "text": " ".join(words)}))
PY
}
