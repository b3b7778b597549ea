#!/usr/bin/env bash
# gpu_run.sh — the one script to run on the GPU machine (H100/H200), from the repo root:
#   bash bench/gpu_run.sh
# Configures with CUDA for sm_90, builds, runs ctest and `helix-bg gpu-test`;
# copies logs to $OUT when set.
set -euo pipefail
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
OUTDIR=${OUT:-build-gpu/out}
mkdir -p "$OUTDIR"
nvidia-smi > "$OUTDIR/nvidia-smi.txt" 2>&1 || true
cmake -S . -B build-gpu -DHX_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 \
  2>&1 | tee "$OUTDIR/configure.log"
cmake --build build-gpu -j"$(nproc)" 2>&1 | tee "$OUTDIR/build.log"
rc=0
ctest --test-dir build-gpu --output-on-failure 2>&1 | tee "$OUTDIR/ctest.log" || rc=1
./build-gpu/helix-bg gpu-test 2>&1 | tee "$OUTDIR/gpu-test.txt" || rc=1
git log -1 --format='%H %ci' > "$OUTDIR/commit.txt" 2>/dev/null || true
exit $rc
