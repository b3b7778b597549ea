#!/usr/bin/env bash
# The complete program in include/helix.h's header comment and the one in
# README.md's "The C API" section: extracted with sed, compiled with only
# include/ on the include path (-Wall -Wextra -Werror), linked against libhelix
# and run on a synthetic model (and on a missing file, which must fail with a
# message naming it).
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
BUILD=$(dirname "$BIN")
LIB=$BUILD/libhelix.a
[ -f "$LIB" ] || { echo "SKIP: $LIB not found (build first)"; exit 77; }
CC=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n '/A complete program/,/Lower level:/{/A complete program/d;/Lower level:/d;s/^ \*     //;s/^ \*$//;p}' \
    include/helix.h > "$tmp/example.c"
grep -q 'int main' "$tmp/example.c" || { echo "FAIL: no program found in include/helix.h's header comment"; exit 1; }
sed -n '/^## The C API/,/^Build against/{/^    /s/^    //p;/^$/p}' README.md > "$tmp/readme.c"
grep -q 'int main' "$tmp/readme.c" || { echo "FAIL: no program found in README.md's C API section"; exit 1; }
flags=(-std=c17 -Wall -Wextra -Werror -I include)
# a sanitizer build's library needs the same runtime (grep without -q: with
# pipefail, nm killed by SIGPIPE would make the test false)
if nm "$LIB" 2>/dev/null | grep '__asan_' > /dev/null; then flags+=(-fsanitize=address,undefined); fi
if [ -f "$BUILD/libhelix_cuda.a" ]; then
    "$CC" "${flags[@]}" -c "$tmp/example.c" -o "$tmp/example.o"
    "$CC" "${flags[@]}" -c "$tmp/readme.c" -o "$tmp/readme.o"
    echo "ok: the header's and the README's examples compile (CUDA build: link and run skipped)"
    exit 0
fi
libs=("$LIB" $(pkg-config --libs libcjson libpcre2-8 libutf8proc) -lm -lpthread)
"$CC" "${flags[@]}" "$tmp/example.c" -o "$tmp/example" "${libs[@]}"
"$CC" "${flags[@]}" "$tmp/readme.c" -o "$tmp/readme" "${libs[@]}"
"$BIN" synth --preset smollm-135m --type q8_0 --layers 2 --vocab 1024 -o "$tmp/m.gguf" -t 2 > /dev/null 2>&1
"$tmp/example" "$tmp/m.gguf" "Hello, world" > "$tmp/out.txt"
grep -q '[0-9][0-9]* tokens, .* tokens/s' "$tmp/out.txt" || { echo "FAIL: unexpected output:"; cat "$tmp/out.txt"; exit 1; }
if "$tmp/example" "$tmp/missing.gguf" "x" > /dev/null 2> "$tmp/err.txt"; then echo "FAIL: a missing model succeeded"; exit 1; fi
grep -q 'missing.gguf' "$tmp/err.txt" || { echo "FAIL: the error does not name the file:"; cat "$tmp/err.txt"; exit 1; }
"$tmp/readme" "$tmp/m.gguf" > "$tmp/out2.txt"
grep -q 'positive [01]\.[0-9][0-9]$' "$tmp/out2.txt" && grep -q 'tokens/s\]' "$tmp/out2.txt" ||
    { echo "FAIL: the README example printed:"; cat "$tmp/out2.txt"; exit 1; }
echo "ok: the header's and the README's examples compile, link and run"
