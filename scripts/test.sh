#!/usr/bin/env bash
# The README's test command: install deps, build, run ctest; then the same tests
# under ASan+UBSan; then compile the CUDA sources when nvcc exists.
# Build folders: build (release, no CUDA), build-asan, build-cuda; scripts/run.sh
# has its own (build-run), so neither switches CUDA on or off for the other.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
jobs=$(nproc)

echo "== release build + tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHX_CUDA=OFF >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== ASan+UBSan build + tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DHX_SANITIZE=ON -DHX_CUDA=OFF \
      -DCMAKE_C_FLAGS="-O1" >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  HX_TEST_SANITIZE=1 ctest --test-dir build-asan --output-on-failure -j"$jobs"

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "== CUDA compile check (no GPU needed)"
  export PATH="$PATH:/usr/local/cuda/bin"
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DHX_CUDA=ON -DHX_TESTS=OFF >/dev/null
  cmake --build build-cuda -j"$jobs"
else
  echo "== nvcc not found: CUDA sources not compiled"
fi
echo "== all tests passed"
