#!/usr/bin/env bash
# Scaling of `helix-bg one-shot --mpi` over ranks on one host: N entries
# (default 100000) across 12 topics (the generator of bench/kb_bench.sh), a
# cold full pass each time (embeddings.bin and insights.* removed first),
# single-process with THREADS threads, then mpirun -np 1..RMAX with one thread
# per rank. Each line: wall seconds (mpirun included), the pass's own split
# (slowest rank's embedding, the vector exchange, the fastest and slowest
# rank's share of the pairs, rank 0's merge and writes) and user CPU seconds.
# Ranks beyond the host's cores oversubscribe it (mpirun --oversubscribe).
#   bash bench/kb_mpi_bench.sh [N] [RMAX] [THREADS] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}; RMAX=${2:-3}; T=${3:-$(nproc)}; JSON=${4:-}
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
python3 - "$N" 11 > "$tmp/data.log" <<'PY'
import json, random, sys
n, seed = int(sys.argv[1]), int(sys.argv[2]); r = random.Random(seed)
vocab = [w.strip() for w in open("examples/kb/data.log").read().replace('"', ' ').replace(',', ' ').split() if w.isalpha()]
topics = ["t%02d" % i for i in range(12)]
for i in range(n):
    words = [r.choice(vocab) for _ in range(r.randint(10, 60))]
    print(json.dumps({"topic": r.choice(topics), "title": " ".join(words[:4]), "text": " ".join(words)}))
PY
run() { # run NAME command...
  local name=$1; shift
  rm -f "$tmp"/embeddings.bin "$tmp"/insights.json "$tmp"/insights.state
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%e %U" -o "$tmp/time" "$@" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
  python3 - "$name" "$tmp/out" "$tmp/time" "$N" "$load" "$JSON" <<'PY'
import json, re, subprocess, sys
name, out, tf, n, load, js = sys.argv[1:7]
text = open(out).read()
wall, user = map(float, open(tf).read().split()[-2:])
m = re.search(r"embedding ([\d.]+) s, all-pairs ([\d.]+) s", text)
mp = re.search(r"mpi: (\d+) ranks.*read ([\d.]+) s, embed ([\d.]+) s, exchange ([\d.]+) s, pairs ([\d.]+)-([\d.]+) s "
               r"\(cpu ([\d.]+)-([\d.]+) s\), merge and write ([\d.]+) s", text)
rec = {"bench": "kb_mpi", "run": name, "entries": int(n), "wall_s": wall, "user_cpu_s": user, "load_before": float(load)}
if mp:
    rec.update(ranks=int(mp.group(1)), embed_s=float(mp.group(3)), exchange_s=float(mp.group(4)),
               pairs_min_s=float(mp.group(5)), pairs_max_s=float(mp.group(6)), pairs_cpu_min_s=float(mp.group(7)),
               pairs_cpu_max_s=float(mp.group(8)), finish_s=float(mp.group(9)))
    print("%-14s wall %7.2f s  cpu %7.2f s  embed %5.2f s  exchange %5.2f s  pairs %6.2f-%6.2f s (cpu %6.2f-%6.2f s)  "
          "merge+write %5.2f s  (load %s)" % (name, wall, user, rec["embed_s"], rec["exchange_s"], rec["pairs_min_s"],
          rec["pairs_max_s"], rec["pairs_cpu_min_s"], rec["pairs_cpu_max_s"], rec["finish_s"], load))
else:
    rec.update(ranks=0, embed_s=float(m.group(1)), pairs_s=float(m.group(2)))
    print("%-14s wall %7.2f s  cpu %7.2f s  embed %5.2f s  all-pairs %6.2f s  (load %s)" % (name, wall, user, rec["embed_s"], rec["pairs_s"], load))
if js == "--json":
    rec["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(json.dumps(rec))
PY
}
run "single -t $T" "$BIN" one-shot "$tmp" --no-think -t "$T"
for r in $(seq 1 "$RMAX"); do
  run "mpi -np $r -t 1" mpirun --oversubscribe -np "$r" "$BIN" one-shot "$tmp" --mpi --no-think -t 1
done
