#!/usr/bin/env bash
# helix-bg serve: a lone stream's single-sequence step against batched steps: see tests/server_lone.py.
set -euo pipefail
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
exec python3 "$(dirname "$0")/server_lone.py"
