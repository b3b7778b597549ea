# server_util.bash — starting and stopping a local HTTP server from a bench
# script (sourced by serve_peer.sh and kb_llm_peer.sh). The caller defines
# die MESSAGE and keeps the server's process id in $pid.

# a free loopback port
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pid=""
# SIGTERM, up to 30 s to exit, then SIGKILL (the EXIT trap calls it too)
stop_server() {
  [[ -n "$pid" ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}
trap stop_server EXIT

# the status code of GET url (curl, or python3 where curl is missing: the GPU machine)
http_code() {
  if command -v curl >/dev/null 2>&1; then curl -s -o /dev/null -w '%{http_code}' "$1" || true
  else python3 -c 'import sys, urllib.request, urllib.error
try: print(urllib.request.urlopen(sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e: print(e.code)
except Exception: print(0)' "$1"; fi
}

# wait_ready PORT LOG: waits for /health 200 (llama-server and helix-bg serve
# answer 503 while loading); dies with LOG's tail if the server exits or
# is not ready after 300 s
wait_ready() {
  local port=$1 log=$2
  for _ in $(seq 1 1200); do
    kill -0 "$pid" 2>/dev/null || { tail -20 "$log" >&2; die "the server exited while starting (log: $log)"; }
    [[ $(http_code "http://127.0.0.1:$port/health") == 200 ]] && return 0
    sleep 0.25
  done
  tail -20 "$log" >&2
  die "the server was not ready after 300 s (log: $log)"
}
