#!/usr/bin/env bash
# helix-bg serve with per-request LoRA adapters (--lora NAME=DIR): see tests/server_lora.py.
set -euo pipefail
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
exec python3 "$(dirname "$0")/server_lora.py"
