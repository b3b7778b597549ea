#!/usr/bin/env bash
# The README's main command: install deps, build, and run one-shot analysis of
# the sample knowledge base (examples/kb) with the built-in lexical embedder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
exec ./build/helix-bg one-shot "${1:-examples/kb}"
