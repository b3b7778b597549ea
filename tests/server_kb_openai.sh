#!/usr/bin/env bash
# helix-bg serve --kb driven by the official openai Python client: see tests/server_kb_openai.py.
# Skips (77), saying why, when the package is missing and cannot be installed.
set -euo pipefail
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
if ! python3 -c "import openai" 2>/dev/null; then
  python3 -m pip install -q openai >/dev/null 2>&1 || true
fi
python3 -c "import openai" 2>/dev/null || { echo "SKIP: the openai package is not installed and pip could not install it"; exit 77; }
exec python3 "$(dirname "$0")/server_kb_openai.py"
