#!/usr/bin/env bash
# The README's main command: install deps, build, and run one-shot analysis of
# the sample knowledge base (examples/kb) with the built-in lexical embedder.
# Its own build folder (build-run): scripts/test.sh configures build/ without
# CUDA, and neither may switch the other's options.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build-run -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-run -j"$(nproc)" >/dev/null
exec ./build-run/helix-bg one-shot "${1:-examples/kb}"
