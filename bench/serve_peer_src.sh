#!/usr/bin/env bash
# serve_peer_src.sh — adds llama-server's sources to the pruned llama.cpp tree in
# .peer/llama.cpp (which holds only what llama-bench and llama-batched-bench need),
# from the same snapshot (d32676d), so bench/serve_peer.sh can build llama-server
# on the device machine.
#
#   bash bench/serve_peer_src.sh [LLAMA_GIT_DIR] [DEST]
#
# LLAMA_GIT_DIR: a llama.cpp git directory holding commit d32676d (default: the
# mirror the fetch tool writes, /work/.mirror/*llama.cpp/repo). DEST: default
# .peer/llama.cpp under the repository root.
#
# What it copies and why:
#   tools/server  the server's C++ sources and CMakeLists (no tests, bench, docs);
#   tools/mtmd    the multimodal library server-context links (no test media,
#                 conversion scripts or docs; mtmd's CMakeLists also declares its
#                 CLIs, so their three small sources come too);
#   tools/ui      CMakeLists, embed.cpp and sources.cmake only: built with
#                 -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF, llama-ui-embed
#                 writes an empty asset table, so no web assets are needed;
#   scripts/ui-assets.cmake  the step that runs llama-ui-embed.
# tools/CMakeLists.txt gets the three subdirectories, under LLAMA_BUILD_SERVER.
# Files already present are checked against the snapshot: a difference stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
commit=d32676d
src=${1:-}
if [[ -z "$src" ]]; then
  for d in /work/.mirror/*llama.cpp/repo /work/llama.cpp/.git; do
    if [[ -d "$d" ]] && git --git-dir="$d" cat-file -e "$commit^{commit}" 2>/dev/null; then src=$d; break; fi
  done
fi
[[ -n "$src" ]] || { echo "serve_peer_src: no llama.cpp git directory with commit $commit (give one as \$1)" >&2; exit 1; }
dest=${2:-$root/.peer/llama.cpp}
[[ -f "$dest/CMakeLists.txt" && -d "$dest/common" && -d "$dest/vendor/cpp-httplib" ]] ||
  { echo "serve_peer_src: $dest is not the pruned llama.cpp tree (CMakeLists.txt, common/, vendor/cpp-httplib/)" >&2; exit 1; }
G() { git --git-dir="$src" "$@"; }
G cat-file -e "$commit^{commit}" 2>/dev/null || { echo "serve_peer_src: $src lacks commit $commit" >&2; exit 1; }
# the tree in dest must be this snapshot: compare a few files that define it
for f in CMakeLists.txt src/llama.cpp common/common.cpp common/CMakeLists.txt; do
  G show "$commit:$f" | cmp -s - "$dest/$f" || { echo "serve_peer_src: $dest/$f is not llama.cpp $commit's" >&2; exit 1; }
done

files=$(G ls-tree -r --name-only "$commit" tools/server tools/mtmd tools/ui scripts/ui-assets.cmake | grep -E \
  '^tools/(server|mtmd|mtmd/models|mtmd/debug)/([^/]+\.(cpp|h)|CMakeLists\.txt)$|^tools/ui/(CMakeLists\.txt|embed\.cpp|sources\.cmake)$|^scripts/ui-assets\.cmake$')
bytes=0
for f in $files; do
  if [[ -e "$dest/$f" ]]; then
    G show "$commit:$f" | cmp -s - "$dest/$f" || { echo "serve_peer_src: $dest/$f differs from $commit's; not overwritten" >&2; exit 1; }
    continue
  fi
  mkdir -p "$dest/$(dirname "$f")"
  G show "$commit:$f" > "$dest/$f"
  bytes=$((bytes + $(stat -c %s "$dest/$f")))
done
t=$dest/tools/CMakeLists.txt
if ! grep -q 'add_subdirectory(server)' "$t"; then
  cat >> "$t" <<'EOF'
# llama-server (bench/serve_peer_src.sh): build with -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF
if (LLAMA_BUILD_SERVER)
    add_subdirectory(mtmd)
    add_subdirectory(ui)
    add_subdirectory(server)
endif()
EOF
fi
echo "serve_peer_src: $(echo "$files" | wc -l) files of llama.cpp $commit in $dest ($bytes bytes added);" \
     "total $(du -sk "$dest" | cut -f1) KiB"
