#!/usr/bin/env bash
# tools/ are clients of the public headers (include/helix.h, helix_kb.h, helix_dev.h):
# fails, listing file:line, when a file under tools/ includes a header of src/.
# An include resolves as the compiler resolves it: a quoted one next to the
# file first, then include/, then src/ (the library's private include path).
set -euo pipefail
cd "$(dirname "$0")/.."
# Exceptions, each with its reason. Everything else under tools/ must be clean.
#  - gpu-test checks each CUDA kernel against the CPU through the backends'
#    internals (and tests/ref_forward.h); those GPU self-checks are leaving the
#    shipped library (issue 19, the CUDA change), and gpu-test follows them.
allowed=(
  tools/helix-bg/cmd_gpu_test.c
)
is_allowed() { local f; for f in "${allowed[@]}"; do [ "$f" = "$1" ] && return 0; done; return 1; }
bad=0 n=0
while IFS= read -r -d '' f; do
  n=$((n + 1))
  while IFS=: read -r line inc; do
    local_first=1
    case $inc in '<'*) local_first=0 ;; esac   # <x.h>: only the include paths
    inc=${inc#*[\"<]}; inc=${inc%%[\">]*}
    dir=$(dirname "$f")
    if [ $local_first = 1 ] && [ -e "$dir/$inc" ]; then res=$(realpath -m --relative-to=. "$dir/$inc")
    elif [ -e "include/$inc" ]; then res="include/$inc"
    elif [ -e "src/$inc" ]; then res="src/$inc"
    else continue; fi                       # generated (hx_version.h) or a system header
    case $res in
      src/*)
        if is_allowed "$f"; then echo "allowed: $f:$line includes $res"
        else echo "OFFENDER: $f:$line includes $res"; bad=$((bad + 1)); fi ;;
    esac
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$f" | sed 's/^\([0-9]*\):.*include[[:space:]]*/\1:/')
done < <(find tools -type f \( -name '*.c' -o -name '*.h' \) -print0)
[ "$n" -gt 0 ] || { echo "FAIL: no files under tools/"; exit 1; }
# the public headers stand alone: include/ only, no src/ on the include path
cc=${CC:-cc}
if command -v "$cc" >/dev/null; then
  for h in helix.h helix_dev.h helix_kb.h; do
    printf '#include "%s"\nint main(void) { return 0; }\n' "$h" |
      "$cc" -std=c17 -Wall -Wextra -Werror -fsyntax-only -Iinclude -x c - ||
      { echo "FAIL: include/$h does not compile alone"; bad=$((bad + 1)); }
  done
fi
if [ "$bad" -gt 0 ]; then echo "FAIL: $bad include(s) of src/ headers under tools/ (use include/helix.h or helix_dev.h)"; exit 1; fi
echo "tools/: $n files, no src/ headers outside the listed exceptions"
