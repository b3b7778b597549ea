#!/usr/bin/env bash
# helix-bg chat: multi-turn over stdin reuses the KV cache (the second turn runs
# only its new tokens), falls back to ChatML with a warning for a model without
# a template, and reports bad input clearly.
set -euo pipefail
BIN=${HX_BIN:-build/helix-bg}
SHARED=${HX_SHARED:-../shared}
M="$SHARED/models/ref-tiny/tiny-qwen3-shared.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'Hello there\nTell me more\n/reset\nAgain\n' | "$BIN" chat -m "$M" --temp 0 -n 6 -t 2 > "$tmp/out" 2> "$tmp/err"
cat "$tmp/err"
grep -q "template" "$tmp/err"
mapfile -t stats < <(grep -o 'prompt [0-9]* new of [0-9]* tokens' "$tmp/err")
[ ${#stats[@]} = 3 ] || { echo "FAIL: expected 3 turns"; exit 1; }
read -r _ new2 _ _ total2 _ <<< "${stats[1]}"
[ "$new2" -lt "$total2" ] || { echo "FAIL: second turn did not reuse the cache (${stats[1]})"; exit 1; }
if "$BIN" chat -m /nonexistent.gguf < /dev/null 2> "$tmp/err2"; then echo "FAIL: missing model accepted"; exit 1; fi
grep -q nonexistent "$tmp/err2" || { echo "FAIL: error does not name the file"; exit 1; }
if "$BIN" chat -m "$M" --device tpu < /dev/null 2> "$tmp/err3"; then echo "FAIL: --device tpu accepted"; exit 1; fi
grep -q "tpu" "$tmp/err3" || { echo "FAIL: bad --device not named"; exit 1; }
printf 'Hello there\n' | "$BIN" chat -m "$M" --temp 0 -n 4 -t 2 --device cpu > /dev/null 2> "$tmp/err4"
grep -q ", cpu;" "$tmp/err4" || { echo "FAIL: --device cpu did not run on the CPU"; cat "$tmp/err4"; exit 1; }
# On a terminal (a pty): Ctrl-C stops a reply and keeps the conversation (the next
# turn reuses the cache), /reset asks first, Ctrl-C at the empty prompt and Ctrl-D exit 0.
if command -v python3 >/dev/null; then
  cat > "$tmp/chat_pty.py" <<'PY'
import os, pty, select, sys, time
binp, model = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.execv(binp, [binp, "chat", "-m", model, "--temp", "0", "-n", "-1", "-c", "4096", "-t", "2"])
buf = b""
def read_until(pat, timeout=60):
    global buf
    end = time.time() + timeout
    while time.time() < end:
        if pat in buf:
            i = buf.index(pat) + len(pat); out = buf[:i]; buf = buf[i:]; return out
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try: buf += os.read(fd, 4096)
            except OSError: break
    raise SystemExit(f"FAIL: timed out waiting for {pat!r}; got {buf[-300:]!r}")
def prompt():
    # libedit sets the terminal up after printing the prompt and may flush
    # what was typed before: wait a moment before typing
    read_until(b"> ")
    time.sleep(0.3)
prompt()
os.write(fd, b"Tell me a long story\r")
time.sleep(0.2)
os.write(fd, b"\x03")                       # Ctrl-C during the reply
out = read_until(b"stopped]")
prompt()
print("ctrl-c stopped the reply, back at the prompt")
os.write(fd, b"And then?\r")
time.sleep(0.2)
os.write(fd, b"\x03")
out = read_until(b"stopped]")
import re
m = re.findall(rb"prompt (\d+) new of (\d+) tokens", out)
assert m and int(m[-1][0]) < int(m[-1][1]), out[-300:]
prompt()
print("the next turn reuses the cache: the conversation was kept")
os.write(fd, b"/reset\r")
read_until(b"[y/N] "); time.sleep(0.3)
os.write(fd, b"n\r")
prompt()
os.write(fd, b"/reset\r")
read_until(b"[y/N] "); time.sleep(0.3)
os.write(fd, b"y\r")
read_until(b"[conversation cleared]")
prompt()
print("/reset asks, n keeps, y clears")
os.write(fd, b"\x03")                       # Ctrl-C at the empty prompt: exit
_, st = os.waitpid(pid, 0)
assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
print("ctrl-c at the prompt exits 0")
pid, fd = pty.fork()
if pid == 0:
    os.execv(binp, [binp, "chat", "-m", model, "--temp", "0", "-n", "4", "-t", "2"])
buf = b""
prompt()
for _ in range(100):                        # Ctrl-D at the prompt: exit (again if the line editor
    try: os.write(fd, b"\x04")              # had not yet taken the terminal and flushed it)
    except OSError: pass
    time.sleep(0.3)
    done, st = os.waitpid(pid, os.WNOHANG)
    if done: break
else:
    raise SystemExit("FAIL: Ctrl-D did not end chat")
assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
print("ctrl-d at the prompt exits 0")
PY
  python3 "$tmp/chat_pty.py" "$BIN" "$M" || { echo "FAIL: chat on a terminal"; exit 1; }
else
  echo "skip: python3 not found (the terminal session)"
fi
echo "1 passed, 0 failed"
