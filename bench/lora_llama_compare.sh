#!/usr/bin/env bash
# lora_llama_compare.sh — helix's greedy ids with LoRA adapters against llama.cpp's --lora on
# SmolLM2-135M-Instruct Q4_1 (bench/lora_llama_compare.py says what is compared). Builds
# bench/llama_greedy.c against a llama.cpp build (a peer outside this repository, never vendored),
# then runs the Python script; extra arguments go to it (--update, --finetuned FILE.gguf, -n N).
#
#   LLAMA_CPP_DIR  llama.cpp source (include/, ggml/include/)             default /work/llama.cpp
#   LLAMA_CPP_LIB  the folder with libllama.so, libggml*.so                default $LLAMA_CPP_DIR/build/bin
#   LLAMA_CONVERT  convert_lora_to_gguf.py of a full llama.cpp tree (optional; without it llama.cpp gets
#                  helix's own lora-convert output), run by CONVERT_PYTHON (needs torch + transformers)
#   HX_BIN         helix-bg                                                default build/helix-bg
#
# helix's parity mode reproduces llama.cpp's AVX2 kernels; on an AVX-512 CPU build the peer without
# AVX-512 (a GGML_NATIVE=ON build sums in other orders there and differs from helix by up to ~0.4 in
# the logits, adapter or not: bench/RESULTS.md):
#   cmake -S llama.cpp -B /tmp/llama-lora-build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
#     -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAMA_CURL=OFF \
#     -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF \
#     -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
#   cmake --build /tmp/llama-lora-build -j2 --target llama
#   LLAMA_CPP_LIB=/tmp/llama-lora-build/bin bash bench/lora_llama_compare.sh
set -euo pipefail
L=${LLAMA_CPP_DIR:-/work/llama.cpp}
LIB=${LLAMA_CPP_LIB:-$L/build/bin}
OUT=${HELIX_PEER_DIR:-$HOME/.cache/helix/peer}
[ -f "$L/include/llama.h" ] || { echo "lora_llama_compare.sh: no $L/include/llama.h (set LLAMA_CPP_DIR)" >&2; exit 2; }
[ -e "$LIB/libllama.so" ] || { echo "lora_llama_compare.sh: no $LIB/libllama.so (set LLAMA_CPP_LIB)" >&2; exit 2; }
mkdir -p "$OUT"
cc -O2 -Wall -Wextra -Werror -o "$OUT/llama_greedy" bench/llama_greedy.c -I"$L/include" -I"$L/ggml/include" \
   -L"$LIB" -lllama -lggml -lggml-base -Wl,-rpath,"$LIB"
conv=()
if [ -n "${LLAMA_CONVERT:-}" ]; then conv=(--convert "$LLAMA_CONVERT" --convert-python "${CONVERT_PYTHON:-python3}"); fi
python3 bench/lora_llama_compare.py --helix "${HX_BIN:-build/helix-bg}" --peer "$OUT/llama_greedy" "${conv[@]}" "$@"
