#!/usr/bin/env bash
# helix-bg serve --kb over curl: see tests/server_kb.py.
set -euo pipefail
command -v curl >/dev/null || { echo "SKIP: curl not found"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
exec python3 "$(dirname "$0")/server_kb.py"
