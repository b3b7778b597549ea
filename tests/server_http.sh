#!/usr/bin/env bash
# helix-bg serve over plain HTTP: see tests/server_http.py.
set -euo pipefail
command -v curl >/dev/null || { echo "SKIP: curl not found"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
exec python3 "$(dirname "$0")/server_http.py"
