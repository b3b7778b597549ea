#!/usr/bin/env bash
# Issue 22's KB pass under MPI with every rank's share of the all-pairs
# product on its own GPU, on a machine with N GPUs:
#   bash bench/kb_mpi_gpu_device.sh [N=1000000] [RANKS="1 R"]
# from the repository root, with a CUDA and MPI build's helix-bg in .devbin/
# (HX_BIN to use another); R defaults to the GPU count (nvidia-smi -L).
# Needs Open MPI's mpirun (MPIRUN to name another) and a helix-bg linked with
# it (CMake found libopenmpi-dev when it was built): without either the script
# stops at once, exit 3, saying which is missing. The device machine cannot
# install packages (no network): the MPI run needs a machine image with
# openmpi-bin and libopenmpi-dev (scripts/deps.sh), and helix-bg built there.
#
# Steps:
#   0. tests/kb_mpi.sh with this helix-bg (KB_MPI_TEST=0 skips it): -np 1/2/3
#      on 3,000 entries equal the single-process pass, also with
#      --allpairs-device cuda (each rank on GPU local-rank % GPUs).
#   1. N generated entries (bench/kb_bench.sh's generator, 12 topics, 10-60
#      words, the lexical embedder); a cold single-process pass:
#      one-shot --no-think --allpairs-device cuda -t $(nproc).
#   2. for each R in RANKS, a cold pass (the three files removed first):
#      mpirun --bind-to none -np R helix-bg one-shot KB --mpi --no-think
#      --allpairs-device cuda -t (nproc / R), then embeddings.bin,
#      insights.state and insights.json compared byte for byte with step 1's.
# Prints per run: process wall time; single: the embedding and all-pairs
# seconds of the pass and its all-pairs line (cuda:0, upload, tiles,
# TFLOP/s); MPI: the mpi: line's stages (read, embed, exchange, pairs on the
# fastest-slowest rank, merge and write on rank 0, ranks on a GPU) and each
# rank's own all-pairs line (its GPU, rows range, tiles); then "identical" or
# "DIFFERENT" per file. Ends with a table of the stages per rank count and
# exits 1 if any file differed, or a rank's pairs did not run on a GPU.
# JSON lines go to $OUT/kb_mpi_gpu.jsonl when OUT is set. KB_ARGS: more
# one-shot options for every pass, split at spaces. DEVICE=cpu runs the same
# with the pairs on the CPU and RANKS default "1 2" (the check of the script
# on a machine without a GPU; a small N).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
BIN=${HX_BIN:-.devbin/helix-bg}
MPIRUN=${MPIRUN:-mpirun}
read -r -a KARGS <<< "${KB_ARGS:-}"
die() { echo "kb_mpi_gpu_device.sh: $*" >&2; exit "${RC:-2}"; }
[ -x "$BIN" ] || die "$BIN: not an executable (build helix-bg with CUDA and MPI, or set HX_BIN)"
if ldd "$BIN" 2>/dev/null | grep -q "not found"; then
  RC=3 die "$BIN cannot start here: $(ldd "$BIN" | grep "not found" | tr -s ' \t' ' ' | paste -sd, -)" \
    "(an MPI build needs libmpi on this machine: openmpi-bin libopenmpi-dev)"
fi
command -v "$MPIRUN" > /dev/null ||
  RC=3 die "'$MPIRUN' not found: this machine has no Open MPI (openmpi-bin, scripts/deps.sh; MPIRUN=PATH for another);" \
    "the MPI run cannot be made here"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/probe"
if "$BIN" one-shot "$tmp/probe" --mpi 2>&1 < /dev/null | grep -q "built without MPI"; then
  RC=3 die "$BIN was built without MPI (CMake found no MPI C library: libopenmpi-dev); rebuild it where Open MPI is installed"
fi
DEV=${DEVICE:-cuda}
case $DEV in cpu|cuda) ;; *) die "DEVICE '$DEV': cuda or cpu" ;; esac
if [ "$DEV" = cuda ]; then
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
  [ "${GPUS:-0}" -gt 0 ] || die "no GPU found by nvidia-smi -L (DEVICE=cpu to check the script on the CPU)"
  RANKS=${2:-"1 $GPUS"}; [ "$GPUS" -eq 1 ] && RANKS=${2:-1}
  GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
else
  GPUS=0; GPU=cpu; RANKS=${2:-"1 2"}
fi
CPUS=$(nproc)
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# one host: shared memory between the ranks (no network transports)
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "kb_mpi_gpu_device: $N entries, $GPUS x $GPU, $CPUS CPUs, ranks: $RANKS, commit $commit" \
     "($("$MPIRUN" --version 2>&1 | head -1))"

if [ "${KB_MPI_TEST:-1}" != 0 ]; then
  echo "== tests/kb_mpi.sh (3,000 entries, -np 1/2/3, cpu and cuda all-pairs)"
  HX_BIN=$BIN bash tests/kb_mpi.sh 2>&1 | tail -8 || die "tests/kb_mpi.sh failed (above)"
fi

source bench/kb_bench_gen.bash
kb=$tmp/kb; mkdir "$kb"
gen "$N" 11 > "$kb/data.log"
files="embeddings.bin insights.state insights.json"
bad=0
rows=()
# run NAME command...: a cold pass; its output in $tmp/NAME.{out,err}, wall seconds in $tmp/NAME.wall
run() {
  local name=$1; shift
  rm -f "$kb"/embeddings.bin "$kb"/embeddings.add "$kb"/insights.json "$kb"/insights.state
  local s; s=$(date +%s.%N)
  "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" || { tail -20 "$tmp/$name.err"; die "$name failed"; }
  awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }' > "$tmp/$name.wall" # (no bc here)
}
echo "== single process, $CPUS threads"
run single "$BIN" one-shot "$kb" --no-think --allpairs-device "$DEV" -t "$CPUS" "${KARGS[@]+"${KARGS[@]}"}"
mkdir "$tmp/ref"; for f in $files; do cp "$kb/$f" "$tmp/ref/$f"; done
line=$(grep "embedded now" "$tmp/single.out" | tail -1)
emb=$(echo "$line" | sed -nE 's/.*\(embedding ([0-9.]+) s, all-pairs ([0-9.]+) s\).*/\1/p')
pairs=$(echo "$line" | sed -nE 's/.*\(embedding ([0-9.]+) s, all-pairs ([0-9.]+) s\).*/\2/p')
echo "single: wall $(cat "$tmp/single.wall") s, embedding $emb s, all-pairs $pairs s"
grep "^all-pairs: " "$tmp/single.err" | sed 's/^/  /'
grep -q "^all-pairs: $DEV" "$tmp/single.err" || { echo "  the single-process pairs did not run on $DEV"; bad=1; }
rows+=("single|$(cat "$tmp/single.wall")|-|$emb|-|$pairs|-|-")
for R in $RANKS; do
  T=$(( CPUS / R > 0 ? CPUS / R : 1 ))
  echo "== mpirun -np $R, $T threads a rank"
  run "np$R" "$MPIRUN" --bind-to none -np "$R" "$BIN" one-shot "$kb" --mpi --no-think --allpairs-device "$DEV" -t "$T" \
    "${KARGS[@]+"${KARGS[@]}"}"
  mline=$(grep "^mpi: " "$tmp/np$R.out" || true)
  [ -n "$mline" ] || { tail -5 "$tmp/np$R.out"; die "-np $R: no mpi: line"; }
  echo "np $R: wall $(cat "$tmp/np$R.wall") s; ${mline#mpi: }"
  grep "^all-pairs: " "$tmp/np$R.err" | sed 's/^/  /'
  want=$([ "$DEV" = cuda ] && echo "$R" || echo 0)
  case $mline in *"pairs on cuda in $want of $R ranks"*) ;; *) echo "  pairs on cuda in other than $want of $R ranks"; bad=1 ;; esac
  for f in $files; do
    if cmp -s "$tmp/ref/$f" "$kb/$f"; then echo "  $f identical"; else echo "  $f DIFFERENT from the single-process pass"; bad=1; fi
  done
  st=$(echo "$mline" | sed -nE 's/.*read ([0-9.]+) s, embed ([0-9.]+) s, exchange ([0-9.]+) s, pairs ([0-9.]+)-([0-9.]+) s .*merge and write ([0-9.]+) s.*/\1|\2|\3|\4-\5|\6/p')
  IFS='|' read -r rd em ex pr mw <<< "$st"
  rows+=("np $R|$(cat "$tmp/np$R.wall")|$rd|$em|$ex|$pr|$mw|$(echo "$mline" | grep -o 'pairs on cuda in [0-9]* of [0-9]*' | cut -d' ' -f5-7)")
done
echo
echo "stages (seconds; single: embed = reading, cache and embedding; MPI: the slowest rank's read and embed," \
     "pairs = fastest-slowest rank, gpu ranks = ranks whose pairs ran on their GPU):"
printf "%-8s %8s %7s %8s %9s %15s %13s %9s\n" run wall read embed exchange pairs merge+write "gpu ranks"
for r in "${rows[@]}"; do
  IFS='|' read -r a b c d e f g h <<< "$r"
  printf "%-8s %8s %7s %8s %9s %15s %13s %9s\n" "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h"
done
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  for r in "${rows[@]}"; do
    IFS='|' read -r a b c d e f g h <<< "$r"
    python3 -c 'import json, sys; a = sys.argv[1:]
num = lambda s: None if s in ("-", "") else float(s)
print(json.dumps({"bench": "kb_mpi_gpu", "run": a[0], "entries": int(a[8]), "wall_s": num(a[1]), "read_s": num(a[2]),
                  "embed_s": num(a[3]), "exchange_s": num(a[4]), "pairs_s": a[5], "merge_write_s": num(a[6]),
                  "gpu_ranks": a[7], "device": a[9], "commit": a[10]}))' "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h" "$N" \
      "$GPUS x $GPU" "$commit" >> "$OUT/kb_mpi_gpu.jsonl"
  done
  echo "wrote $OUT/kb_mpi_gpu.jsonl"
fi
[ "$bad" = 0 ] || RC=1 die "a run differed from the single-process pass or left a rank's pairs off the GPU (above)"
echo "kb_mpi_gpu_device: every MPI run equals the single-process pass"
