#!/usr/bin/env bash
# serve_peer.sh — the same end-to-end load (bench/serve_load.py) against helix-bg serve
# and llama.cpp's llama-server, one after the other on this machine, with matching
# settings; both engines' rows go to one JSONL file (engine "helix" / "llama.cpp").
#
#   bash bench/serve_peer.sh -m MODEL.gguf [--device cuda|cpu] [--np 128] [--ctx-slot 512]
#        [--concurrency 1,8,32,128] [--seconds 12] [--max-tokens 128] [--prompt-words 26]
#        [-t THREADS] [--engines helix,llama.cpp] [--jsonl FILE] [--label NAME]
#        [--helix BIN] [--llama-server BIN] [--build-llama DIR] [--logs DIR]
#
# Settings both servers get: the same GGUF, --np slots of --ctx-slot positions each
# (-c = np x ctx-slot; llama-server with --no-kv-unified, so each slot has its own
# ctx-slot positions as in helix), 512 tokens per decode step (helix -b 512;
# llama-server -b 512 -ub 512), continuous batching (llama-server -cb), on cuda all
# layers on the GPU (llama-server -ngl 99 -fa on; helix --device cuda, whose attention
# is always fused) and on cpu none (-ngl 0 -fa on). llama-server's host-RAM prompt
# cache is off (--cache-ram 0: helix has none; prefix reuse within a slot stays on in
# both) and its web UI too. Requests (serve_load.py): /v1/completions, stream with
# stream_options.include_usage, temperature 0, ignore_eos, max_tokens, prompts of
# --prompt-words random words; one unrecorded warm-up round first.
#
# --build-llama DIR: configure and build llama-server from .peer/llama.cpp into DIR
# first (CUDA for sm_90 with --device cuda), unless DIR/bin/llama-server exists; the
# sources must hold tools/server (bench/serve_peer_src.sh adds them). Without -m it
# only builds.
# Each server's log goes to --logs DIR (default: a temporary folder, kept on failure).
set -euo pipefail
cd "$(dirname "$0")/.."
model="" device="" np=128 ctx_slot=512 conc=1,8,32,128 seconds=12 max_tokens=128 words=26 threads=""
engines=helix,llama.cpp jsonl=bench/serve_peer.jsonl label="" helix=${HX_BIN:-build/helix-bg}
llama="" build_llama="" logs=""
die() { echo "serve_peer: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    -m|--model) model=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --ctx-slot) ctx_slot=$2; shift 2 ;;
    --concurrency) conc=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --prompt-words) words=$2; shift 2 ;;
    -t|--threads) threads=$2; shift 2 ;;
    --engines) engines=$2; shift 2 ;;
    --jsonl) jsonl=$2; shift 2 ;;
    --label) label=$2; shift 2 ;;
    --helix) helix=$2; shift 2 ;;
    --llama-server) llama=$2; shift 2 ;;
    --build-llama) build_llama=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ -n "$model" || -n "$build_llama" ]] || die "give the model: -m MODEL.gguf"
[[ -z "$model" || -f "$model" ]] || die "no model file '$model'"
if [[ -z "$device" ]]; then device=cpu; nvidia-smi -L >/dev/null 2>&1 && device=cuda; fi
[[ $device == cpu || $device == cuda ]] || die "--device cpu or cuda (got '$device')"
[[ -n "$threads" ]] || threads=$(nproc)
keep_logs=0
if [[ -z "$logs" ]]; then logs=$(mktemp -d /tmp/serve_peer.XXXXXX); else mkdir -p "$logs"; keep_logs=1; fi

if [[ -n "$build_llama" && ! -x "$build_llama/bin/llama-server" ]]; then
  src=.peer/llama.cpp
  [[ -f $src/tools/server/server.cpp ]] || die "$src lacks tools/server: run bench/serve_peer_src.sh first"
  cuda=(-DGGML_CUDA=OFF)
  [[ $device == cuda ]] && cuda=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real)
  echo "# building llama-server in $build_llama (${cuda[*]})" >&2
  cmake -S "$src" -B "$build_llama" -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF > "$logs/llama-cmake.log" 2>&1 ||
    { tail -30 "$logs/llama-cmake.log" >&2; die "llama.cpp cmake failed (log: $logs/llama-cmake.log)"; }
  cmake --build "$build_llama" --target llama-server -j"$(nproc)" > "$logs/llama-build.log" 2>&1 ||
    { tail -30 "$logs/llama-build.log" >&2; die "llama-server build failed (log: $logs/llama-build.log)"; }
fi
[[ -n "$llama" ]] || llama=${build_llama:+$build_llama/bin/llama-server}
if [[ -z "$model" ]]; then echo "# built $llama" >&2; [[ $keep_logs == 1 ]] || rm -rf "$logs"; exit 0; fi
label=${label:-$(basename "$model" .gguf)}
ctx=$((np * ctx_slot))
if [[ $device == cuda ]]; then devname=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
else devname="cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $threads threads"; fi
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)

source bench/server_util.bash

fail=0
IFS=, read -ra which <<< "$engines"
for eng in "${which[@]}"; do
  port=$(free_port)
  log=$logs/$eng.log
  case $eng in
    helix)
      [[ -x "$helix" ]] || die "no helix-bg at '$helix' (--helix)"
      args=(-np "$np" -c "$ctx" -b 512 --device "$device" -t "$threads")
      cmd=("$helix" serve -m "$model" --host 127.0.0.1 --port "$port" "${args[@]}")
      eng_commit=$commit ;;
    llama.cpp)
      [[ -n "$llama" && -x "$llama" ]] || die "no llama-server (--llama-server BIN or --build-llama DIR)"
      ngl=0; [[ $device == cuda ]] && ngl=99
      args=(-np "$np" -c "$ctx" --no-kv-unified -b 512 -ub 512 -cb -fa on -ngl "$ngl" -t "$threads" --cache-ram 0
            --no-webui)
      cmd=("$llama" -m "$model" --host 127.0.0.1 --port "$port" "${args[@]}")
      eng_commit=d32676d ;;
    *) die "unknown engine '$eng' (helix, llama.cpp)" ;;
  esac
  echo "# $eng: ${cmd[*]}" >&2
  "${cmd[@]}" > "$log" 2>&1 &
  pid=$!
  wait_ready "$port" "$log"
  settings="$(basename "${cmd[0]}") ${args[*]}"
  python3 bench/serve_load.py --port "$port" --engine "$eng" --label "$label" --device "$devname" \
    --commit "$eng_commit" --concurrency "$conc" --seconds "$seconds" --max-tokens "$max_tokens" \
    --prompt-words "$words" --warmup --settings "$settings" --jsonl "$jsonl" || fail=1
  stop_server
done
echo "# rows appended to $jsonl; server logs in $logs" >&2
[[ $fail == 0 && $keep_logs == 0 ]] && rm -rf "$logs"
exit $fail
