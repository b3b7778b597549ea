#!/usr/bin/env bash
# The KB against planted files and a hostile or unlucky environment (issue 22):
#  1. a symlinked .helix.lock is not written through;
#  2. links planted at the old temp names are not written through;
#  5. one-shot refuses while a daemon holds the KB, and removing .helix.lock
#     does not let a second daemon in;
#  6. a failed pass is retried with backoff, without a change to data.log;
#  7. a FIFO data.log or embeddings.bin gives a clear error, never a hang.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
tmp=$(mktemp -d)
dpid=
cleanup() { [ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
entries() { # entries N > file
  python3 - "$1" <<'PY'
import json, sys
words = "cache index replica kernel token pool queue socket lock shard disk backup alert deploy".split()
for i in range(int(sys.argv[1])):
    print(json.dumps({"topic": "t%d" % (i % 3), "text": " ".join(words[(i * k) % len(words)] for k in range(1, 9))}))
PY
}
wait_for() { # wait_for SECONDS CMD...: true once CMD succeeds
  local end=$((SECONDS + $1)); shift
  while [ $SECONDS -lt $end ]; do "$@" && return 0; sleep 0.1; done
  return 1
}

# 1 + 2: planted links at .helix.lock and at the temp names of the old code
# (a daemon --once run has a pid we cannot know beforehand: plant a range)
mkdir "$tmp/a"; entries 50 > "$tmp/a/data.log"
printf precious > "$tmp/victim"
ln -s "$tmp/victim" "$tmp/a/.helix.lock"
next=$(sh -c 'echo $$')
for p in $(seq "$next" $((next + 40))); do
  ln -s "$tmp/victim" "$tmp/a/embeddings.bin.tmp.$p"; ln -s "$tmp/victim" "$tmp/a/insights.json.tmp.$p"
done
"$BIN" daemon "$tmp/a" --once -q
[ "$(cat "$tmp/victim")" = precious ] || fail "a planted link was written through: victim now holds '$(cat "$tmp/victim")'"
[ -f "$tmp/a/.helix.lock" ] && [ ! -L "$tmp/a/.helix.lock" ] || fail ".helix.lock is still a link"
! compgen -G "$tmp/a/*.tmp.*" > /dev/null || fail "planted temp names were not cleaned up under the lock"
python3 -m json.tool "$tmp/a/insights.json" > /dev/null

# 5: the lock binds one-shot too, and survives removal of .helix.lock
"$BIN" daemon "$tmp/a" --interval 30 -q 2> "$tmp/d5.err" &
dpid=$!
wait_for 10 grep -qsx "$dpid" "$tmp/a/.helix.lock" || fail "daemon did not note its pid"
if "$BIN" one-shot "$tmp/a" -q 2> "$tmp/os.err"; then fail "one-shot wrote the KB while a daemon held it"; fi
grep -q "locked by another helix-bg (pid $dpid" "$tmp/os.err" || fail "one-shot: no clear lock message: $(cat "$tmp/os.err")"
rm -f "$tmp/a/.helix.lock"
if "$BIN" daemon "$tmp/a" --once -q 2> "$tmp/d2.err"; then fail "a second daemon started after .helix.lock was removed"; fi
grep -q "locked by another helix-bg" "$tmp/d2.err" || fail "second daemon: no clear lock message: $(cat "$tmp/d2.err")"
kill -TERM $dpid; wait $dpid || fail "daemon did not exit 0 on SIGTERM"
dpid=
"$BIN" one-shot "$tmp/a" -q || fail "one-shot refused after the daemon stopped"

# 6: a pass that fails (insights.json is a directory: the rename fails) is
# retried without any change to data.log, and succeeds once the cause is gone
mkdir "$tmp/b"; entries 40 > "$tmp/b/data.log"; mkdir "$tmp/b/insights.json"
"$BIN" daemon "$tmp/b" --interval 30 2> "$tmp/d6.err" &
dpid=$!
wait_for 10 grep -qs "pass failed: .*insights.json.*retrying in 1 s" "$tmp/d6.err" || fail "no failure/retry message: $(cat "$tmp/d6.err")"
wait_for 10 grep -qs "retrying in 2 s" "$tmp/d6.err" || fail "the failed pass was not retried: $(cat "$tmp/d6.err")"
rmdir "$tmp/b/insights.json"
wait_for 15 test -f "$tmp/b/insights.json" || fail "the daemon did not retry after the cause was gone: $(cat "$tmp/d6.err")"
grep -q "pass succeeded after a failure" "$tmp/d6.err" || fail "no recovery message"
kill -TERM $dpid; wait $dpid; dpid=

# 7: FIFOs where KB files should be: a clear error (data.log) or a warning
# and a rebuilt cache (embeddings.bin), within seconds, not a hang
mkdir "$tmp/c"; mkfifo "$tmp/c/data.log"
rc=0; timeout 20 "$BIN" one-shot "$tmp/c" -q 2> "$tmp/c.err" || rc=$?
[ $rc -ne 124 ] || fail "one-shot blocked on a FIFO data.log"
[ $rc -ne 0 ] || fail "one-shot accepted a FIFO data.log"
grep -q "data.log: is a FIFO, not a regular file" "$tmp/c.err" || fail "no clear FIFO error: $(cat "$tmp/c.err")"
rm "$tmp/c/data.log"; entries 30 > "$tmp/c/data.log"; mkfifo "$tmp/c/embeddings.bin"
timeout 20 "$BIN" one-shot "$tmp/c" -q 2> "$tmp/c2.err" || fail "one-shot with a FIFO embeddings.bin: rc $? $(cat "$tmp/c2.err")"
grep -q "embeddings.bin: is a FIFO" "$tmp/c2.err" || fail "no FIFO warning for the cache: $(cat "$tmp/c2.err")"
[ -f "$tmp/c/embeddings.bin" ] && [ ! -p "$tmp/c/embeddings.bin" ] || fail "the FIFO cache was not replaced by a file"
echo "1 passed, 0 failed"
