#!/usr/bin/env bash
# paged_kv_device.sh — the shared KV pool of pages (api/context.c) on the GPU
# machine, from the repo root, with prebuilt binaries in D (default .devbin:
# helix-bg, test_cuda_seq, test_kv_pages, test_api; shared libraries, if any,
# in D/lib). Builds nothing.
#
# Paging is CPU only in this change: a CUDA context (and -tp, the layer split)
# keeps fixed slots of n_ctx / n_seq_max (its backend table has no kv_map), so
# on the device this checks that the CUDA path is unchanged and that the pool
# works in the same build:
#   1. test_cuda_seq: many sequences vs each alone on CUDA (fixed slots);
#   2. helix-bg gpu-test;
#   3. test_kv_pages and test_api: the pool on the CPU, from the CUDA build;
#   4. a CUDA serve context reports fixed slots: its ready line says
#      "slots x N positions", /metrics helix_kv_page_positions is 0.
# Prints one line per step: "PASS <step>" or "FAIL <step> (rc N)"; logs in
# $OUT (default /tmp/paged-kv). Exit status: the number of failures.
#
#   bash bench/paged_kv_device.sh [D]
set -uo pipefail
D=${1:-.devbin}
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}"
export HX_BIN="$D/helix-bg"
O=${OUT:-/tmp/paged-kv}
mkdir -p "$O"
nvidia-smi -L
fails=0
step() { # name, timeout, command...
  local name=$1 t=$2; shift 2
  timeout "$t" "$@" > "$O/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then echo "PASS $name"; else echo "FAIL $name (rc $rc)"; fails=$((fails + 1)); tail -15 "$O/$name.log"; fi
}
step test_cuda_seq 400 "$D/test_cuda_seq"
step gpu-test 600 "$D/helix-bg" gpu-test
step test_kv_pages 300 "$D/test_kv_pages"
step test_api 400 "$D/test_api"

# 4: serve on CUDA with 4 slots: fixed slots, reported as such
f=/tmp/paged-kv-smol.gguf
[ -f "$f" ] || "$D/helix-bg" synth --preset smollm-135m --type q8_0 --layers 2 -o "$f" > /dev/null
"$D/helix-bg" serve -m "$f" --device cuda -np 4 -c 1024 --port 0 > "$O/serve.log" 2>&1 &
pid=$!
port=
for _ in $(seq 1 300); do
  port=$(grep -o 'listening on http://[^:]*:[0-9]*' "$O/serve.log" | grep -o '[0-9]*$' | head -1)
  grep -q " ready " "$O/serve.log" && [ -n "$port" ] && break
  sleep 0.2
done
page=$(curl -s "http://127.0.0.1:$port/metrics" | awk '$1 == "helix_kv_page_positions" {print $2}')
out=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt": "hello", "max_tokens": 8, "temperature": 0, "ignore_eos": true}')
kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null
if grep -q "4 slots x 256 positions" "$O/serve.log" && [ "$page" = 0 ] && echo "$out" | grep -q '"completion_tokens":8'; then
  echo "PASS serve-cuda-slots"
else
  echo "FAIL serve-cuda-slots (page '$page', reply ${out:0:200})"; grep "ready" "$O/serve.log"; fails=$((fails + 1))
fi
echo "paged_kv_device: $fails failed"
exit $fails
