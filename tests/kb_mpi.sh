#!/usr/bin/env bash
# one-shot --mpi equals a single-process pass exactly: on a generated KB of
# 3,000 entries (deletes across the ranks' byte ranges, deletes naming no
# entry, malformed and blank lines, single-entry topics, near-duplicates, a
# partial last line) and on examples/kb, `mpirun -np 1/2/3 --oversubscribe`
# writes the same embeddings.bin, insights.state and insights.json bytes and
# prints the same summary and warnings as `one-shot` without MPI; a later
# single-process pass continues incrementally from the MPI pass's state.
# All-pairs on each rank's GPU (--allpairs-device cuda): with CUDA and a GPU,
# -np 1/2/3 equal the single-process pass and the CPU's bytes, every rank's
# share on the GPU; without, every rank refuses with the reason, no hang.
# Skips (77) when mpirun is absent or helix-bg was built without MPI.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found (Open MPI: openmpi-bin, scripts/deps.sh)"; exit 77; fi
# Open MPI refuses root without these; one host: shared memory only (no
# network transports, no UCX, whose memory hooks do not mix with ASan)
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mkdir "$tmp/probe"
if "$BIN" one-shot "$tmp/probe" --mpi 2>&1 </dev/null | grep -q "built without MPI"; then
  echo "SKIP: $BIN was built without MPI (CMake found no MPI C library: libopenmpi-dev)"; exit 77
fi
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "${HX_TEST_SANITIZE:-}" = 1 ]; then
  # LeakSanitizer: Open MPI's own start-up allocations are not helix's leaks. Its
  # plugins stay loaded and stacks are unwound without frame pointers, so the
  # suppressions can name the libraries those allocations come from.
  export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
  printf 'leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libpmix.so\nleak:libhwloc.so\nleak:libevent\nleak:mca_\nleak:libucs\nleak:libucp\nleak:libuct\n' > "$tmp/lsan.supp"
  export LSAN_OPTIONS="suppressions=$tmp/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fi

python3 - "$tmp/gen.log" <<'PY'
import json, random, sys
r = random.Random(7)
words = ("cache queue index shard replica latency deploy rollback schema migration token embedding vector search "
         "cluster node pod disk memory thread lock retry timeout budget alert pager incident review design").split()
out, offs, texts, pos = [], [], [], 0
def put(line):
    global pos
    b = (line + "\n").encode()
    out.append(b); pos += len(b)
topics = ["ops", "search", "infra", "ml", "billing", "security"]
n = 3000
for i in range(n):
    here = pos
    if i % 97 == 5:   put("{not json")                       # malformed
    if i % 211 == 7:  put("")                                # blank line
    t = r.choice(topics) if i % 50 else "single-%d" % i      # single-entry topics
    ws = [r.choice(words) for _ in range(r.randint(6, 30))]
    if texts and i % 37 == 0:                                # near-duplicate of an earlier entry
        ws = r.choice(texts[-20:]) + ["again"]
    texts.append(ws)
    offs.append(pos)
    put(json.dumps({"topic": t, "title": " ".join(ws[:3]), "text": " ".join(ws)}))
    if i % 23 == 11:                                         # delete a random earlier entry (often another range)
        put(json.dumps({"delete": r.choice(offs)}))
    if i % 401 == 300:                                       # names no entry: inside an early line
        put(json.dumps({"delete": offs[r.randint(0, 50)] + 3}))
    if i % 599 == 100:                                       # names a later offset: no entry (yet)
        put(json.dumps({"delete": pos + 10}))
put(json.dumps({"delete": offs[1]})); put(json.dumps({"delete": offs[1]}))  # twice
sys.stdout = open(sys.argv[1], "wb")
sys.stdout.write(b"".join(out) + b'{"topic": "ops", "text": "partial last li')
PY

fail() { echo "FAIL: $*"; exit 1; }
# normalize: no timings, no mpi line; warnings about data.log lines, sorted
norm_out() { grep -v '^mpi: ' "$1" | sed -E 's/[0-9]+\.[0-9]+ s/T s/g'; }
norm_err() { grep -o 'data.log: offset [0-9]*: [^;]*' "$1" | sort; }
outputs="embeddings.bin insights.state insights.json"

# compare NAME KB-SOURCE [one-shot flags]: single process vs mpirun -np 1, 2, 3 in the same
# directory (insights.state names data.log's device and inode)
compare() {
  local name=$1 src=$2; shift 2
  local kb="$tmp/$name"
  rm -rf "$kb"; mkdir -p "$kb/ref"; cp "$src" "$kb/data.log"
  "$BIN" one-shot "$kb" "$@" > "$kb/ref/out" 2> "$kb/ref/err" || fail "$name: single-process one-shot failed"
  for f in $outputs; do cp "$kb/$f" "$kb/ref/$f"; done
  for np in 1 2 3; do
    rm -f "$kb"/embeddings.bin "$kb"/insights.json "$kb"/insights.state
    timeout 300 mpirun --oversubscribe -np $np "$BIN" one-shot "$kb" --mpi -t 1 "$@" > "$kb/out$np" 2> "$kb/err$np" ||
      { cat "$kb/err$np"; fail "$name: mpirun -np $np failed"; }
    grep -q "^mpi: $np ranks" "$kb/out$np" || fail "$name: -np $np: no mpi line"
    for f in $outputs; do cmp "$kb/ref/$f" "$kb/$f" || fail "$name: -np $np: $f differs from the single-process pass"; done
    diff <(norm_out "$kb/ref/out") <(norm_out "$kb/out$np") || fail "$name: -np $np: summary differs"
    diff <(norm_err "$kb/ref/err") <(norm_err "$kb/err$np") || fail "$name: -np $np: warnings differ"
  done
  echo "$name: -np 1, 2, 3 equal the single-process pass ($(grep -o '^[0-9]* entries ([^)]*)' "$kb/ref/out"))"
}

compare generated "$tmp/gen.log" --no-think
grep -q "pairs on cuda in 0 of 3 ranks" "$tmp/generated/out3" ||
  fail "generated: 3,000 entries went to a GPU under auto (below the size where it gains)"
# the generated KB holds what the comparison is meant to cover
g="$tmp/generated"
grep -q "names no entry" "$g/ref/err" || fail "generated: no delete naming no entry"
n_del=$(grep -o '([0-9]* deleted' "$g/ref/out" | grep -o '[0-9]*'); [ "$n_del" -gt 100 ] || fail "generated: only $n_del deleted"
python3 - "$g/insights.json" <<'PY' || fail "generated: report lacks near-duplicates, cross-links or overlaps"
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r["near_duplicates"]) == 20 and len(r["cross_links"]) == 50 and r["topic_overlaps"], r.keys()
PY
# shallow lists: the kept lists are cut at their depth on every rank
compare cut "$tmp/gen.log" --no-think --max-dups 3 --max-links 4 --max-overlaps 2
# the sample KB, think stage included (rank 0 runs it)
compare example examples/kb/data.log
# a BERT embedder (random weights, MiniLM's shape, one layer): each rank embeds its share
"$BIN" synth --preset minilm-l6 --type f32 --layers 1 --vocab 4000 -o "$tmp/bert.gguf" > /dev/null 2>&1 ||
  fail "synth of a BERT model failed"
head -120 examples/kb/data.log > "$tmp/small.log"
compare bert "$tmp/small.log" --no-think --embed-model "$tmp/bert.gguf"
grep -q "embedded now with bert.gguf" "$tmp/bert/out3" || fail "bert: the BERT embedder was not used"

# a warm pass reuses the cache on every rank, and the single-process pass after an
# MPI pass is incremental from its insights.state, with the same report
kb="$g"
timeout 300 mpirun --oversubscribe -np 3 "$BIN" one-shot "$kb" --mpi -t 1 --no-think > "$kb/warm" 2>/dev/null || fail "warm mpirun failed"
grep -q ", 0 embedded now" "$kb/warm" || fail "warm: the cache was not reused"
cmp "$kb/ref/insights.json" "$kb/insights.json" || fail "warm: report differs"
printf '%s\n' '{"topic": "ops", "text": "cache queue index shard after the mpi pass"}' >> "$kb/data.log"
"$BIN" one-shot "$kb" --no-think > "$kb/inc" 2>/dev/null || fail "single-process pass after MPI failed"
grep -q "incremental pairs" "$kb/inc" || { cat "$kb/inc"; fail "the pass after MPI was not incremental"; }
cp "$kb/insights.json" "$kb/inc.json"
"$BIN" one-shot "$kb" --no-think --full > /dev/null 2>&1
cmp "$kb/inc.json" "$kb/insights.json" || fail "incremental after MPI differs from a full pass"

# each rank's share of the pairs on its GPU (local rank % GPUs), as the
# single-process GPU pass and the CPU's bytes; or, with no usable GPU, a
# refusal on every rank naming the reason
mkdir -p "$tmp/probe-gpu"; head -50 "$tmp/gen.log" > "$tmp/probe-gpu/data.log"
if "$BIN" one-shot "$tmp/probe-gpu" --no-think --allpairs-device cuda > /dev/null 2> "$tmp/probe-gpu.err"; then
  compare gpu "$tmp/gen.log" --no-think --allpairs-device cuda
  for np in 1 2 3; do
    grep -q "pairs on cuda in $np of $np ranks" "$tmp/gpu/out$np" || fail "gpu: -np $np: not every rank on its GPU"
  done
  # and the CPU's bytes: a CPU pass in the same directory (insights.state names data.log's inode)
  rm -f "$tmp/gpu"/embeddings.bin "$tmp/gpu"/insights.json "$tmp/gpu"/insights.state
  "$BIN" one-shot "$tmp/gpu" --no-think --allpairs-device cpu > /dev/null 2>&1 || fail "gpu: the CPU pass failed"
  for f in $outputs; do cmp "$tmp/gpu/ref/$f" "$tmp/gpu/$f" || fail "gpu: $f of the GPU passes differs from the CPU's"; done
else
  why=$(grep -o "all-pairs on cuda: .*" "$tmp/probe-gpu.err" | head -1)
  [ -n "$why" ] || { cat "$tmp/probe-gpu.err"; fail "single-process --allpairs-device cuda failed without saying why"; }
  cp "$g/insights.json" "$tmp/before.json"
  if timeout 120 mpirun --oversubscribe -np 2 "$BIN" one-shot "$g" --mpi -t 1 --no-think --allpairs-device cuda \
       > /dev/null 2> "$tmp/gpu.err"; then
    fail "--mpi --allpairs-device cuda succeeded where the single process refused ($why)"
  fi
  for r in 0 1; do
    grep -q "rank $r: all-pairs on cuda: " "$tmp/gpu.err" || { cat "$tmp/gpu.err"; fail "rank $r did not say why it refused"; }
  done
  cmp "$tmp/before.json" "$g/insights.json" || fail "a refused pass changed insights.json"
  echo "gpu: no GPU pass here ($why); -np 2 refuses on both ranks"
fi

# errors: a missing KB fails on every rank with a message naming it, no hang
if timeout 120 mpirun --oversubscribe -np 2 "$BIN" one-shot "$tmp/nope" --mpi > /dev/null 2> "$tmp/nope.err"; then
  fail "missing KB accepted"
fi
grep -q "nope" "$tmp/nope.err" || { cat "$tmp/nope.err"; fail "error does not name the KB"; }
echo "1 passed, 0 failed"
