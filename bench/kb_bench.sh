#!/usr/bin/env bash
# The knowledge-base benchmark: generate N entries across 12 topics and time
# one-shot passes with the built-in embedder:
#   cold        nothing cached: embed all, compare all pairs
#   warm        nothing new: incremental pass with nothing to compare
#   warm-full   --full: cache reused, all pairs compared again
#   +100        100 entries appended: incremental (100 x N pairs)
#   +10000      10,000 more appended: incremental (10,000 x N pairs)
# Each line: seconds (total, embedding, pairs), the device that compared the
# pairs, peak RSS, then the think stage that follows the pass (classification,
# patterns: its "think:" line) and the whole process's wall time; with --json
# one JSON object per pass as well (for bench/results.jsonl). For the +100
# pass alone, several binaries alternating: bench/kb_inc_bench.sh.
#   bash bench/kb_bench.sh [N] [THREADS] [--json] [--device cpu|cuda|auto] [--embed-model M]
# --device cuda: all-pairs on the GPU (--allpairs-device cuda), N defaults to
# 1,000,000 and the passes skip the think stage (--no-think); cpu (default
# 100,000 entries) and auto as one-shot's --allpairs-device.
# --embed-model M: a BERT .gguf or Hugging Face folder instead of the built-in
# lexical embedder, run on the same device (--embed-device); each pass that
# embeds adds the embedder alone: seconds and texts/s (its "embedding:" line),
# beside "embedding" (which adds reading data.log and the cache).
# MODEL_LABEL: what the JSON says the model is (default the path). KB_ARGS:
# more one-shot options for every pass (thresholds), split at spaces.
# KB_PASSES="cold +100 +10000": only these passes, in this order (default all
# five); an append (+100, +10000) is made whether its pass runs or not.
# --both: issue 22's two tables in one run, each from a fresh KB: N entries
# (default 100,000) with the pairs on the CPU, then KB_GPU_N (default
# 1,000,000) with the pairs on the GPU (--device cuda), both with peak RSS:
#   bash bench/kb_bench.sh --both [N] [THREADS] [--json] [--embed-model M]
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=cpu; MODEL=; BOTH=; pos=()
while [ $# -gt 0 ]; do
  case $1 in
    --both) BOTH=1; shift ;;
    --embed-model) [ $# -ge 2 ] || { echo "kb_bench.sh: --embed-model needs a BERT .gguf or folder" >&2; exit 2; }
              [ -e "$2" ] || { echo "kb_bench.sh: --embed-model '$2': no such file or folder" >&2; exit 2; }
              MODEL=$2; shift 2 ;;
    --device) [ $# -ge 2 ] || { echo "kb_bench.sh: --device needs cpu, cuda or auto" >&2; exit 2; }
              case $2 in cpu|cuda|auto) DEV=$2 ;; *) echo "kb_bench.sh: --device '$2': cpu, cuda or auto" >&2; exit 2 ;; esac
              shift 2 ;;
    *) pos+=("$1"); shift ;;
  esac
done
set -- "${pos[@]+"${pos[@]}"}"
if [ -n "$BOTH" ]; then
  [ "$DEV" = cpu ] || { echo "kb_bench.sh: --both picks the devices itself (cpu, then cuda): no --device" >&2; exit 2; }
  m=(); [ -n "$MODEL" ] && m=(--embed-model "$MODEL")
  NC=${1:-100000}; NG=${KB_GPU_N:-1000000}; TB=${2:-$(nproc)}
  for run in "cpu $NC" "cuda $NG"; do
    read -r d n <<< "$run"
    echo "== kb_bench: $n entries, all-pairs on $d, $TB threads"
    bash bench/kb_bench.sh "$n" "$TB" ${3:+"$3"} --device "$d" "${m[@]+"${m[@]}"}"
  done
  exit 0
fi
DEFN=100000; EXTRA=()
[ "$DEV" = cuda ] && { DEFN=1000000; EXTRA=(--no-think); }
[ -n "$MODEL" ] && EXTRA+=(--embed-model "$MODEL" --embed-device "$DEV")
PASSES=${KB_PASSES:-cold warm warm-full +100 +10000}
read -r -a KARGS <<< "${KB_ARGS:-}"; EXTRA+=("${KARGS[@]+"${KARGS[@]}"}")
N=${1:-$DEFN}; T=${2:-$(nproc)}; JSON=${3:-}
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source bench/kb_bench_gen.bash # gen COUNT SEED
# peak RSS in KiB of a command: GNU time where installed, else the kernel's
# count for the children of a python wrapper (the device machine has no time(1))
peak() { # peak OUT ERR cmd...
  local out=$1 err=$2; shift 2
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -v "$@" > "$out" 2> "$err"
    grep "Maximum resident" "$err" | grep -o '[0-9]*$'
  else
    python3 -c 'import resource, subprocess, sys
with open(sys.argv[1], "w") as o, open(sys.argv[2], "w") as e: rc = subprocess.run(sys.argv[3:], stdout=o, stderr=e).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)' "$out" "$err" "$@"
  fi
}
run() { # run NAME [flags]: the pass NAME unless KB_PASSES leaves it out
  local name=$1; shift
  case " $PASSES " in *" $name "*) ;; *) return 0 ;; esac
  local rss line ap th em s wall
  s=$(date +%s.%N)
  # a failed pass: no summary line, reported below with its stderr
  rss=$(peak "$tmp/out.txt" "$tmp/err.txt" "$BIN" one-shot "$tmp" -t "$T" --allpairs-device "$DEV" "${EXTRA[@]+"${EXTRA[@]}"}" "$@") || true
  wall=$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }') # (no bc on the GPU machine)
  line=$(grep "embedded now" "$tmp/out.txt" | tail -1 || true); ap=$(grep "^all-pairs: " "$tmp/err.txt" | tail -1 || true)
  th=$(grep "^think: " "$tmp/err.txt" | tail -1 || true)
  em=$(grep "^embedding: " "$tmp/err.txt" | tail -1 || true)
  [ -n "$line" ] || { echo "kb_bench.sh: pass $name failed:" >&2; sed '/^\tCommand being timed/,$d' "$tmp/err.txt" | tail -5 >&2; exit 1; }
  python3 - "$name" "$line" "$rss" "$N" "$T" "$JSON" "$DEV" "$ap" "$th" "$wall" "$em" "${MODEL_LABEL:-$MODEL}" <<'PY'
import json, re, subprocess, sys
name, line, rss, n, t, js, dev, ap, th, wall, em, model = sys.argv[1:13]
m = re.search(r"^(\d+) entries .*?(\d+) embedded now .*?, ([\d.]+) s \(embedding ([\d.]+) s, (incremental pairs|all-pairs) ([\d.]+) s\)", line)
live, emb, total, te, kind, tp = m.groups()
ran = ap.split(" ")[1] if ap else "-"
print("%-10s %7s entries %6s embedded  total %7s s  embedding %6s s  %-17s %7s s on %-4s  peak RSS %5d MiB"
      % (name, live, emb, total, te, kind, tp, ran, int(rss) // 1024))
if ap: print("           " + ap)
ee = re.search(r"^embedding: (\d+) texts with (.*), ([\d.]+) s \((\d+) texts/s\)", em)
if ee: print("           embedder alone: %s texts with %s, %s s, %s texts/s" % ee.groups())
tm = re.search(r"^think: \d+ rows, ([\d.]+) s", th)
print("           %sprocess wall %.2f s" % (("think %s s (%s), " % (tm.group(1), th.split(": ", 2)[2])) if tm else "",
                                           float(wall)))
if js == "--json":
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"bench": "kb", "pass": name, "entries": int(live), "embedded": int(emb), "threads": int(t),
                      "seconds": float(total), "embed_seconds": float(te), "pairs": kind, "pairs_seconds": float(tp),
                      "allpairs_device": ran, "peak_rss_mib": int(rss) // 1024, "commit": commit,
                      "think_seconds": float(tm.group(1)) if tm else None, "process_seconds": round(float(wall), 3),
                      "embed_model": model or "lexical-384", "embed_device": dev if model else "cpu",
                      "embedder_seconds": float(ee.group(3)) if ee else None,
                      "embed_texts_per_s": int(ee.group(4)) if ee else None}))
PY
}
gen "$N" 11 > "$tmp/data.log"
run cold
run warm
run warm-full --full
gen 100 12 >> "$tmp/data.log"; run +100
gen 10000 13 >> "$tmp/data.log"; run +10000
