#!/usr/bin/env bash
# The KB pass with entry pairs on the GPU (--allpairs-device cuda) against the
# CPU: insights.json byte for byte, full and then incremental (+500 entries),
# on 20,000 generated entries (lexical-384; 12 topics, every 9th entry a topic
# of its own; some texts repeated: exact ties), and the log line names the
# device. Skipped (77) where helix-bg has no CUDA or no GPU is usable, as in CI
# (tests/test_kb_allpairs checks the shared window logic on the CPU there).
set -uo pipefail
BIN=${HX_BIN:-build/helix-bg}
"$BIN" gpu-test --probe > /dev/null 2>&1
rc=$?
[ $rc = 0 ] || { echo "SKIP: no usable GPU in this build/machine"; exit 77; }
set -e
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/kb_gen.bash
mkdir "$tmp/cpu" "$tmp/cuda"
kb_gen 20000 1 > "$tmp/cpu/data.log"
cp "$tmp/cpu/data.log" "$tmp/cuda/data.log"
for step in full incremental; do
  for dev in cpu cuda; do
    "$BIN" one-shot "$tmp/$dev" --no-think --allpairs-device $dev > "$tmp/$dev.out" 2> "$tmp/$dev.err"
    grep -q "^all-pairs: $dev " "$tmp/$dev.err" || { echo "FAIL: $step: no 'all-pairs: $dev' line"; cat "$tmp/$dev.err"; exit 1; }
  done
  cmp "$tmp/cpu/insights.json" "$tmp/cuda/insights.json" || { echo "FAIL: $step: insights differ"; exit 1; }
  grep "^all-pairs" "$tmp/cuda.err"
  echo "$step pass: insights.json identical ($(grep -c similarity "$tmp/cpu/insights.json") findings)"
  kb_gen 500 2 | tee -a "$tmp/cpu/data.log" >> "$tmp/cuda/data.log"
done
echo ok
