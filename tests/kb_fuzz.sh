#!/usr/bin/env bash
# The three libFuzzer targets (fuzz/fuzz_*.c), built straight from the few
# sources each needs with clang, ASan + UBSan and -fno-sanitize-recover=all (so
# a UBSan report is a failure, not a line in the log):
#  1. every input in fuzz/regress/<target>/ must run clean (inputs that once
#     crashed a reader or tripped UBSan: a delete of 1e300, a negative f64
#     array the old fuzz_gguf harness cast to uint64);
#  2. each target then fuzzes for HX_FUZZ_SECONDS (default 8) from a small seed
#     corpus; any crash, leak, UBSan report or timeout fails the test.
# About 40 s in all on 2 cores. Skipped without clang/libFuzzer, and in the
# sanitizer ctest pass (it brings its own sanitizers; once is enough).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${HX_BIN:-build/helix-bg}
SECS=${HX_FUZZ_SECONDS:-8}
if [ -n "${HX_TEST_SANITIZE:-}" ]; then echo "SKIP: runs in the release ctest pass only"; exit 77; fi
command -v clang > /dev/null || { echo "SKIP: clang not installed (fuzz targets need libFuzzer)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$tmp/probe.c"
clang -fsanitize=fuzzer "$tmp/probe.c" -o "$tmp/probe" 2> /dev/null || { echo "SKIP: clang cannot link -fsanitize=fuzzer"; exit 77; }

F="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g -std=c17
   -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Isrc -Wall -Wextra -Werror"
# shellcheck disable=SC2086
{
  clang $F fuzz/fuzz_datalog.c src/kb/kb.c src/core/core.c -lcjson -lm -o "$tmp/fuzz_datalog" &
  clang $F fuzz/fuzz_cache.c src/kb/kb.c src/core/core.c -lcjson -lm -o "$tmp/fuzz_cache" &
  wait
  clang $F fuzz/fuzz_gguf.c src/gguf/gguf.c src/core/core.c src/quant/types.c -lm -o "$tmp/fuzz_gguf"
}
for t in datalog cache gguf; do [ -x "$tmp/fuzz_$t" ] || { echo "FAIL: fuzz_$t did not build"; exit 1; }; done

# 1. regression inputs
for t in datalog cache gguf; do
  ls fuzz/regress/$t/* > /dev/null 2>&1 || continue
  if ! "$tmp/fuzz_$t" fuzz/regress/$t/* > "$tmp/$t.replay" 2>&1; then
    echo "FAIL: fuzz_$t on fuzz/regress/$t:"; grep -E "runtime error|ERROR|SUMMARY" "$tmp/$t.replay" | head; exit 1
  fi
done

# 2. seeds, then a bounded run of each target
mkdir -p "$tmp/c/datalog" "$tmp/c/cache" "$tmp/c/gguf" "$tmp/kb" "$tmp/art"
head -c 3000 examples/kb/data.log > "$tmp/c/datalog/head"
printf '{"topic": "a", "text": "x"}\r\n{"delete": 0}\n{"topic": "b", "text": "y\\u0041"}\n' > "$tmp/c/datalog/mix"
cp fuzz/regress/datalog/* "$tmp/c/datalog/" 2> /dev/null || true
head -n 3 examples/kb/data.log > "$tmp/kb/data.log"
"$BIN" one-shot "$tmp/kb" -q && cp "$tmp/kb/embeddings.bin" "$tmp/c/cache/three"
cp tests/data/gguf/*.bin fuzz/regress/gguf/* "$tmp/c/gguf/" 2> /dev/null || true
run() { # run TARGET MAX_LEN [extra flags]
  local t=$1 len=$2; shift 2
  if ! "$tmp/fuzz_$t" -max_total_time="$SECS" -max_len="$len" -timeout=10 -rss_limit_mb=1024 \
       -artifact_prefix="$tmp/art/$t-" -print_final_stats=1 "$@" "$tmp/c/$t" > "$tmp/$t.log" 2>&1; then
    echo "FAIL: fuzz_$t found a problem:"; grep -E "runtime error|ERROR|SUMMARY|Test unit written" "$tmp/$t.log" | head
    for a in "$tmp"/art/$t-*; do [ -f "$a" ] && { echo "input (base64):"; base64 -w0 "$a" | head -c 4000; echo; }; done
    return 1
  fi
  echo "fuzz_$t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$tmp/$t.log" | grep -o '[0-9]*$') runs in $SECS s, clean"
}
rc=0
run datalog 4096 & p1=$!
run cache 8192 & p2=$!
wait $p1 || rc=1; wait $p2 || rc=1
run gguf 65536 -dict=fuzz/gguf.dict || rc=1
[ $rc -eq 0 ] || exit 1
echo "1 passed, 0 failed"
