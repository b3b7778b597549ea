#!/usr/bin/env bash
# helix-bg cpu-test --json: one matvec line per (type, ISA level) from AVX2 up to
# the current level, each naming the lower level whose kernels it runs
# ("same_kernels_as"), and such a level is never flagged slower (the same code:
# a gap there is the machine). Timings are not checked: the machine may be shared.
set -uo pipefail
BIN=${HX_BIN:-build/helix-bg}
[ -x "$BIN" ] || { echo "FAIL: $BIN not built"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

"$BIN" cpu-test --quick -t 2 --json --type Q4_K --type Q4_0 > "$tmp/out" 2> "$tmp/err" || bad "cpu-test: exit $?"
grep '"matvec"' "$tmp/out" > "$tmp/mv"
n=$(wc -l < "$tmp/mv")
levels=$(grep -c '"mix": "Q4_K"' "$tmp/mv")
[ "$n" -ge 2 ] && [ "$n" = $((2 * levels)) ] || bad "matvec lines: $n for 2 types ($levels for Q4_K)"
grep -v '"same_kernels_as": "' "$tmp/mv" && bad "a matvec line without same_kernels_as"
grep '"same_kernels_as": "[a-z]' "$tmp/mv" | grep -v '"slower_than": ""' && bad "a level flagged slower on a lower level's kernels"
# the lowest level measured runs its own kernels
head -1 "$tmp/mv" | grep -q '"same_kernels_as": ""' || bad "the first level names another's kernels"
grep -q '^levels\|^one ISA level' "$tmp/err" || bad "no summary line on stderr"
[ $fail = 0 ] && echo "cli_cpu_test: all passed ($n matvec lines)"
exit $fail
