#!/usr/bin/env bash
# lora_bench.sh [PRESET] [TYPE] [RANK] [THREADS] — CPU speed with a LoRA adapter:
# a synthetic model (helix-bg synth), a random rank-RANK adapter on every
# q/k/v/o/gate/up/down matrix (bench/lora_bench.c), the merged copy
# (helix-bg lora-merge), then prefill and decode of the three, interleaved.
set -eu
cd "$(dirname "$0")/.."
P="${1:-smollm-135m}" T="${2:-q8_0}" R="${3:-16}" TH="${4:-2}"
BIN="${HX_BIN:-build/helix-bg}" LIB="${HX_LIB:-build/libhelix.a}"
out="$(mktemp -d /tmp/hx_lora_bench.XXXXXX)"
trap 'rm -rf "$out"' EXIT
cc -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -Isrc -o "$out/lora_bench" bench/lora_bench.c "$LIB" \
  $(pkg-config --libs libcjson libpcre2-8 libutf8proc) -lm -lpthread
"$BIN" synth --preset "$P" --type "$T" -o "$out/base.gguf" >/dev/null
"$out/lora_bench" "$out/base.gguf" - "$out/adapter.gguf" "$R" "$TH"
"$BIN" lora-merge -m "$out/base.gguf" --lora "$out/adapter.gguf" -o "$out/merged.gguf"
"$out/lora_bench" "$out/base.gguf" "$out/merged.gguf" "$out/adapter.gguf" "$R" "$TH"
