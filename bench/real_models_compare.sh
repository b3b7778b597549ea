#!/usr/bin/env bash
# real_models_compare.sh — build bench/llama_greedy.c against a llama.cpp build (a peer outside this
# repository, never vendored) and run bench/real_models_compare.py (helix vs llama.cpp on the real models
# that bench/real_models_fetch.sh fetched). Extra arguments go to the Python script (e.g. --update).
#   LLAMA_CPP_DIR=/work/llama.cpp (source tree with include/, ggml/include/ and build/bin/libllama.so)
#   PYTHON=/work/venv/bin/python (needs the gguf and jinja2 modules)
set -euo pipefail
L=${LLAMA_CPP_DIR:-/work/llama.cpp}
PY=${PYTHON:-/work/venv/bin/python}
OUT=${HELIX_PEER_DIR:-$HOME/.cache/helix/peer}
mkdir -p "$OUT"
cc -O2 -Wall -Wextra -Werror -o "$OUT/llama_greedy" bench/llama_greedy.c -I"$L/include" -I"$L/ggml/include" \
   -L"$L/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$L/build/bin"
"$PY" bench/real_models_compare.py --helix "${HX_BIN:-build/helix-bg}" --peer "$OUT/llama_greedy" "$@"
