#!/usr/bin/env bash
# The whole incremental one-shot, pass and think stage: 100 entries appended
# to an N-entry KB (kb_bench.sh's generator and seeds), timed from the
# process's start to its end, with each binary given in turn on the same
# saved KB, REPS rounds (the binaries alternate within a round, so machine
# load hits them alike); medians per binary:
#   wall, user + sys CPU, the pass (its "embedded now" line: total and pairs),
#   the think stage (its "think:" line where the binary prints one: load,
#   classify, TF-IDF rows, write; an older binary's "classified ..., X s"),
# and whether every binary wrote the same insights.json (cmp).
#   bash bench/kb_inc_bench.sh [--n N] [--reps R] [--threads T] [--json] [BIN ...]
# BIN defaults to build/helix-bg; the first BIN makes the N-entry KB (a cold
# pass, ~20-30 s at 100,000 on 2 cores), which every round restores (data.log
# truncated in place: same inode, so insights.state stays valid).
set -euo pipefail
cd "$(dirname "$0")/.."
N=100000; REPS=5; T=$(nproc); JSON=; BINS=()
while [ $# -gt 0 ]; do
  case $1 in
    --n) N=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --threads) T=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    -*) echo "kb_inc_bench.sh: unknown option $1" >&2; exit 2 ;;
    *) BINS+=("$1"); shift ;;
  esac
done
[ ${#BINS[@]} -gt 0 ] || BINS=(build/helix-bg)
for b in "${BINS[@]}"; do [ -x "$b" ] || { echo "kb_inc_bench.sh: $b is not an executable" >&2; exit 2; }; done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source bench/kb_bench_gen.bash # gen COUNT SEED: kb_bench.sh's entries
kb=$tmp/kb; mkdir "$kb" "$tmp/saved"
gen "$N" 11 > "$kb/data.log"
gen 100 12 > "$tmp/add.log"
echo "making the $N-entry KB with ${BINS[0]} (cold pass)" >&2
"${BINS[0]}" one-shot "$kb" -t "$T" -q > /dev/null
size=$(stat -c %s "$kb/data.log")
for f in "$kb"/*; do [ "$(basename "$f")" = data.log ] || cp -p "$f" "$tmp/saved/"; done
restore() {
  find "$kb" -mindepth 1 ! -name data.log -delete
  cp -p "$tmp/saved/"* "$kb/"
  truncate -s "$size" "$kb/data.log"
  cat "$tmp/add.log" >> "$kb/data.log"
}
timer=(); [ -x /usr/bin/time ] && timer=(/usr/bin/time -f "time %e %U %S" -o "$tmp/time.txt")
for r in $(seq 1 "$REPS"); do
  for i in "${!BINS[@]}"; do
    restore
    s=$(date +%s.%N)
    "${timer[@]+"${timer[@]}"}" "${BINS[$i]}" one-shot "$kb" -t "$T" > "$tmp/out.txt" 2> "$tmp/err.txt"
    e=$(date +%s.%N)
    cpu=-; [ -s "$tmp/time.txt" ] && cpu=$(awk '/^time/{print $3 + $4}' "$tmp/time.txt")
    echo "$i $(echo "$e - $s" | bc) $cpu" >> "$tmp/runs.txt"
    { grep "embedded now" "$tmp/out.txt" | tail -1; grep "classified" "$tmp/out.txt" | tail -1; grep "^think:" "$tmp/err.txt" | tail -1 || true; } \
      | sed "s/^/$i /" >> "$tmp/lines.txt"
    [ "$r" = 1 ] && cp "$kb/insights.json" "$tmp/insights.$i.json"
  done
done
same=yes
for i in "${!BINS[@]}"; do cmp -s "$tmp/insights.0.json" "$tmp/insights.$i.json" || same=no; done
load=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$tmp/runs.txt" "$tmp/lines.txt" "$N" "$T" "$REPS" "$same" "$load" "${JSON:-0}" "${BINS[@]}" <<'PY'
import json, re, statistics, subprocess, sys, datetime
runs, lines, n, t, reps, same, load, js = sys.argv[1:9]
bins = sys.argv[9:]
med = lambda v: statistics.median(v) if v else float("nan")
R = {i: {"wall": [], "cpu": [], "pass": [], "pairs": [], "think": [], "load": [], "classify": [], "tfidf": [], "write": []}
     for i in range(len(bins))}
for l in open(runs):
    i, w, c = l.split()
    R[int(i)]["wall"].append(float(w))
    if c != "-": R[int(i)]["cpu"].append(float(c))
for l in open(lines):
    i, rest = l.split(" ", 1); d = R[int(i)]
    m = re.search(r"embedded now .*?, ([\d.]+) s \(embedding [\d.]+ s, (?:incremental pairs|all-pairs) ([\d.]+) s\)", rest)
    if m: d["pass"].append(float(m.group(1))); d["pairs"].append(float(m.group(2)))
    m = re.search(r"^think: \d+ rows, ([\d.]+) s: load ([\d.]+) s, classify ([\d.]+) s \(TF-IDF rows ([\d.]+) s\), write ([\d.]+) s", rest)
    if m:
        for k, g in zip(("load", "classify", "tfidf", "write"), m.groups()[1:]): d[k].append(float(g))
    m = re.search(r"classified .*, ([\d.]+) s$", rest.strip())
    if m: d["think"].append(float(m.group(1)))
cpu = open("/proc/cpuinfo").read()
model = re.search(r"model name\s*:\s*(.*)", cpu)
device = "%s, %s cores, %s threads" % (model.group(1).strip() if model else "CPU", subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip(), t)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print("+100 into %s entries, one-shot -t %s, %s rounds, load average %s at the end; insights.json identical across binaries: %s"
      % (n, t, reps, load, same))
for i, b in enumerate(bins):
    d = R[i]
    f = lambda k: ("%.3f" % med(d[k])) if d[k] else "-"
    print("%-28s wall %s s (min %.3f, max %.3f)  cpu %s s  pass %s s (pairs %s)  think %s s (load %s, classify %s, TF-IDF %s, write %s)"
          % (b, f("wall"), min(d["wall"]), max(d["wall"]), f("cpu"), f("pass"), f("pairs"), f("think"), f("load"),
             f("classify"), f("tfidf"), f("write")))
    if js == "1":
        row = {"date": datetime.date.today().isoformat(), "commit": commit, "device": device, "engine": "helix",
               "model": "lexical-384", "mix": "-", "test": "kb one-shot +100 into %s" % n, "binary": b,
               "threads": int(t), "reps": int(reps), "load_average": load, "insights_identical": same == "yes"}
        for k in d:
            if d[k]: row[k + "_s_median"] = round(med(d[k]), 3)
        row["wall_s_all"] = [round(x, 3) for x in d["wall"]]
        print(json.dumps(row))
PY
