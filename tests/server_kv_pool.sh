#!/usr/bin/env bash
# helix-bg serve: long and short requests sharing a paged KV pool: see tests/server_kv_pool.py.
set -euo pipefail
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
exec python3 "$(dirname "$0")/server_kv_pool.py"
