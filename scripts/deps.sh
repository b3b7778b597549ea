#!/usr/bin/env bash
# Install the Debian packages helix needs to build and test, if any are missing.
# Used by the README commands and by .ci/run. Safe to run repeatedly.
set -euo pipefail
need=()
for p in build-essential cmake pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libedit-dev libmicrohttpd-dev libgnutls28-dev openssl clang libsimde-dev openmpi-bin libopenmpi-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  echo "deps: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# llama.cpp's gguf-py, used by tests to cross-check our GGUF reader and writer
# (optional: those tests skip without it)
if command -v python3 >/dev/null && ! python3 -c "import gguf" 2>/dev/null; then
  python3 -m pip install -q gguf >/dev/null 2>&1 || echo "deps: could not pip install gguf (cross-check tests will skip)"
fi
# the official OpenAI client, which tests/server_openai.sh drives helix-bg serve with
# (optional: that test skips without it)
if command -v python3 >/dev/null && ! python3 -c "import openai" 2>/dev/null; then
  python3 -m pip install -q openai >/dev/null 2>&1 || echo "deps: could not pip install openai (server_openai will skip)"
fi
