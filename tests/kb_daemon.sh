#!/usr/bin/env bash
# Daemon reliability: the lock, clean shutdown on SIGTERM, a concurrent appender
# never gets a torn entry embedded, and kill -9 at random points never leaves an
# unloadable cache or report nor loses entries (a restart converges to the
# result of one uninterrupted pass).
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d)
cleanup() { pkill -9 -f "helix-bg daemon $tmp" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
gen() { # gen N SEED > file: N entries across 8 topics
  python3 - "$1" "$2" <<'PY'
import json, random, sys
n, seed = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(seed)
words = "cache index replica kernel token pool queue socket lock shard disk backup alert deploy".split()
for i in range(n):
    t = " ".join(r.choice(words) for _ in range(r.randint(6, 30)))
    print(json.dumps({"topic": "t%d" % (i % 8), "title": "entry %d" % i, "text": t}))
PY
}
fail() { echo "FAIL: $*"; exit 1; }
# same_cache DIR1 DIR2: the two caches hold the same records, each read as a
# pass reads it: embeddings.bin, then embeddings.add's records when it names
# that base (a pass that only appends writes those instead of a new base)
same_cache() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
def records(d):
    b = open(d + "/embeddings.bin", "rb").read()
    ver, count, dim, fpl = struct.unpack_from("<4I", b, 4)
    assert b[:4] == b"HXEC" and ver == 3
    rec, body = 16 + 4 * dim, 20 + fpl
    out = [b[body + rec * i: body + rec * (i + 1)] for i in range(count)]
    try:
        a = open(d + "/embeddings.add", "rb").read()
    except FileNotFoundError:
        return out
    n, adim, afpl = struct.unpack_from("<3I", a, 8)
    base_n, base_sum = struct.unpack_from("<IQ", a, 20 + afpl)
    if base_n == count and base_sum == struct.unpack_from("<Q", b, len(b) - 8)[0]:
        out += [a[32 + afpl + rec * i: 32 + afpl + rec * (i + 1)] for i in range(n)]
    return out
sys.exit(0 if records(sys.argv[1]) == records(sys.argv[2]) else 1)
PY
}

# 1. lock + SIGTERM
mkdir "$tmp/a"; gen 300 1 > "$tmp/a/data.log"
"$BIN" daemon "$tmp/a" --interval 0.2 --pidfile "$tmp/a.pid" -q &
dpid=$!
for _ in $(seq 50); do [ -f "$tmp/a/insights.json" ] && break; sleep 0.1; done
[ -f "$tmp/a/insights.json" ] || fail "daemon wrote no report"
if "$BIN" daemon "$tmp/a" --once -q 2> "$tmp/lock.err"; then fail "second daemon was allowed"; fi
grep -q "locked by another helix-bg (pid $dpid" "$tmp/lock.err" || fail "no clear lock message"
kill -TERM $dpid; wait $dpid || fail "daemon did not exit 0 on SIGTERM"
[ ! -f "$tmp/a.pid" ] || fail "pidfile left behind"

# 2. concurrent appender writing each line in pieces
mkdir "$tmp/b"; gen 200 2 > "$tmp/b/data.log"
"$BIN" daemon "$tmp/b" --interval 0.05 -q &
dpid=$!
gen 150 3 | python3 -c '
import sys, time, random
r = random.Random(5)
with open(sys.argv[1], "ab", buffering=0) as f:
    for line in sys.stdin.buffer:
        cut = r.randint(1, len(line) - 1)
        f.write(line[:cut]); time.sleep(r.random() * 0.004); f.write(line[cut:])
' "$tmp/b/data.log"
sleep 0.5
kill -TERM $dpid; wait $dpid
"$BIN" daemon "$tmp/b" --once -q
mkdir "$tmp/b2"; cp "$tmp/b/data.log" "$tmp/b2/"
"$BIN" one-shot "$tmp/b2" -q
same_cache "$tmp/b" "$tmp/b2" || fail "cache after concurrent appends differs from a clean pass (torn entry embedded?)"
cmp -s "$tmp/b/insights.json" "$tmp/b2/insights.json" || fail "report after concurrent appends differs from a clean pass"

# 3. kill -9 at random points during passes
mkdir "$tmp/c" "$tmp/ref"
gen 6000 4 > "$tmp/c/data.log"; cp "$tmp/c/data.log" "$tmp/ref/"
"$BIN" one-shot "$tmp/ref" -q
for i in $(seq 8); do
  gen 400 $((10 + i)) >> "$tmp/c/data.log"
  "$BIN" daemon "$tmp/c" --interval 0.05 -q 2>>"$tmp/kill.err" &
  dpid=$!
  sleep "0.0$((RANDOM % 9 + 1))"
  kill -9 $dpid 2>/dev/null || true; wait $dpid 2>/dev/null || true
  if [ -f "$tmp/c/insights.json" ]; then python3 -m json.tool "$tmp/c/insights.json" >/dev/null || fail "kill -9 left a broken report"; fi
  if [ -f "$tmp/c/embeddings.bin" ]; then
    mkdir -p "$tmp/probe"; cp "$tmp/c/data.log" "$tmp/c/embeddings.bin" "$tmp/probe/"
    if [ -f "$tmp/c/embeddings.add" ]; then cp "$tmp/c/embeddings.add" "$tmp/probe/"; fi
    "$BIN" one-shot "$tmp/probe" -q 2> "$tmp/probe.err"
    ! grep -q "discarding\|ignoring it" "$tmp/probe.err" || fail "kill -9 left a damaged cache: $(cat "$tmp/probe.err")"
    rm -rf "$tmp/probe"
  fi
done
cp "$tmp/c/data.log" "$tmp/ref/data.log"
"$BIN" one-shot "$tmp/ref" -q
"$BIN" daemon "$tmp/c" --once -q
! ls "$tmp/c" | grep -q "\.tmp\." || fail "temp files of killed writes were not cleaned up on restart"
cmp -s "$tmp/c/insights.json" "$tmp/ref/insights.json" || fail "restarted daemon did not converge to the uninterrupted result"
same_cache "$tmp/c" "$tmp/ref" || fail "cache after restarts differs from the uninterrupted one"
echo "1 passed, 0 failed"
