"""helix-bg serve: one stream alone takes the single-sequence greedy step
(hx_decode_greedy), a batch of streams takes hx_decode, and a stream moves
between the two whenever others join or leave. Its greedy tokens must not
depend on that: the same request gives the same text alone, among other
streams, when others join in the middle of it and when it is left alone in
the middle of it. Also: a stop string and a client hang-up on the lone path.
/metrics' helix_single_stream_steps_total shows which path ran."""
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import Checks, Server, log, synth_model  # noqa: E402

check = Checks()
model = synth_model()
srv = Server(["-m", model, "-np", "4", "-c", "4096", "-t", "2", "--timeout", "300"])
N = 40          # tokens of the request compared
LONG = 3 * N    # tokens of the streams around it


def body(prompt, n, **kw):
    b = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": True,
         "stream_options": {"include_usage": True}}
    b.update(kw)
    return b


class Stream:
    """One streamed /v1/completions read on its own thread: the text pieces in
    order, the usage count, the finish reason; `started` is set at the first
    piece, `at(k)` waits for k pieces."""

    def __init__(self, b, hang_up_after=0):
        self.b, self.hang_up_after = b, hang_up_after
        self.pieces, self.tokens, self.finish, self.error = [], None, None, None
        self.cv = threading.Condition()
        self.done = False
        self.th = threading.Thread(target=self.run)
        self.th.start()

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
            c.request("POST", "/v1/completions", body=json.dumps(self.b), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError("HTTP %d %r" % (r.status, r.read()[:200]))
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    break
                j = json.loads(line[6:])
                if j.get("usage"):
                    self.tokens = j["usage"]["completion_tokens"]
                for ch in j.get("choices") or []:
                    if ch.get("finish_reason"):
                        self.finish = ch["finish_reason"]
                    if ch.get("text"):
                        with self.cv:
                            self.pieces.append(ch["text"])
                            self.cv.notify_all()
                if self.hang_up_after and len(self.pieces) >= self.hang_up_after:
                    r.close()
                    c.sock.close()
                    break
            c.close()
        except Exception as x:  # noqa: BLE001 - reported by the checks
            self.error = str(x)
        with self.cv:
            self.done = True
            self.cv.notify_all()

    def at(self, k, timeout=120):
        with self.cv:
            self.cv.wait_for(lambda: len(self.pieces) >= k or self.done, timeout)
        return len(self.pieces) >= k

    def join(self):
        self.th.join(180)
        return "".join(self.pieces)


def single_steps():
    return srv.metrics().get("helix_single_stream_steps_total", -1)


def idle(timeout=30):
    return srv.idle(timeout)


PA = "Alpha request: the quick brown fox jumps over the lazy dog, " * 3
OTHERS = ["Bravo %d: a stream that runs beside the first one, with its own words. " % i * 2 for i in range(3)]

try:
    # ---- alone: every step after the prompt is the single-sequence step ----
    s0 = single_steps()
    check(s0 >= 0, "/metrics has helix_single_stream_steps_total")
    a = Stream(body(PA, N))
    ref = a.join()
    s1 = single_steps()
    check(a.error is None and a.tokens == N and a.finish == "length", "alone: %s tokens, %s (%s)" % (a.tokens, a.finish, a.error))
    check(s1 - s0 == N - 1, "alone: %d single-stream steps for %d tokens (want %d)" % (s1 - s0, N, N - 1))
    refs = []
    for i, p in enumerate(OTHERS):
        o = Stream(body(p, LONG + 8 * i))
        refs.append(o.join())
        check(o.error is None and o.tokens == LONG + 8 * i, "reference of another stream: %s tokens (%s)" % (o.tokens, o.error))

    # ---- among others from start to end: batched steps only while they run ----
    check(idle(), "idle before the mixed runs")
    others = [Stream(body(p, LONG + 8 * i)) for i, p in enumerate(OTHERS)]
    check(all(o.at(1) for o in others), "the other streams are decoding")
    s2 = single_steps()
    a = Stream(body(PA, N))
    got = a.join()
    s3 = single_steps()
    check(a.error is None and a.tokens == N, "among others: %s tokens (%s)" % (a.tokens, a.error))
    check(got == ref, "among others: the same greedy text as alone\n  alone:  %r\n  others: %r" % (ref, got))
    check(s3 == s2, "among others: no single-stream step while 4 streams ran (%d)" % (s3 - s2))
    # the others end one by one (8 tokens apart); the last is left alone for its last tokens: the switch back
    outs = [o.join() for o in others]
    s4 = single_steps()
    for i, (o, t) in enumerate(zip(others, outs)):
        check(o.error is None and o.tokens == LONG + 8 * i and t == refs[i],
              "other stream %d: the same text as alone (%s tokens, %s)" % (i, o.tokens, o.error))
    check(s4 - s3 >= 1, "the last of the others ran its last steps alone (%d single steps)" % (s4 - s3))

    # ---- alone, then others join in the middle, then it is alone again ----
    check(idle(), "idle before the join run")
    s5 = single_steps()
    a = Stream(body(PA, 4 * N))
    check(a.at(N // 2), "the lone stream is under way")
    s6 = single_steps()
    joined = [Stream(body(p, N // 2)) for p in OTHERS]
    got_j = [j.join() for j in joined]
    s7 = single_steps()
    got = a.join()
    s8 = single_steps()
    full = Stream(body(PA, 4 * N))
    ref4 = full.join()
    check(a.error is None and a.tokens == 4 * N, "join run: %s tokens (%s)" % (a.tokens, a.error))
    check(got == ref4, "others joined mid-stream: the same text as alone\n  alone:  %r\n  joined: %r" % (ref4, got))
    check(ref4.startswith(ref), "a longer request starts with the shorter one's text")
    check(s6 - s5 >= N // 2 - 1 and s8 > s7, "join run: single steps before (%d) and after (%d) the others"
          % (s6 - s5, s8 - s7))
    for i, t in enumerate(got_j):
        check(joined[i].error is None and joined[i].tokens == N // 2 and refs[i].startswith(t),
              "a stream that joined a lone one: its text is its own alone (%s)" % joined[i].error)

    # ---- a stop string on the lone path: the text before it, finish "stop" ----
    check(idle(), "idle before the stop-string run")
    cut = len(ref) * 2 // 3
    stop = ref[cut:cut + 3]
    want = ref[:ref.find(stop)]
    a = Stream(body(PA, N, stop=[stop]))
    got = a.join()
    check(a.error is None and got == want and a.finish == "stop",
          "lone stop string %r: %r, %s (want %r)" % (stop, got, a.finish, want))

    # ---- a client that hangs up on the lone path: its slot is freed, the next request is right ----
    check(idle(), "idle before the hang-up")
    h = Stream(body(PA, 100 * N), hang_up_after=5)
    h.join()
    check(idle(), "hang-up on the lone path frees the slot")
    m = srv.metrics()
    check(m.get("helix_requests_cancelled_total", 0) >= 1, "the hang-up is counted as cancelled")
    a = Stream(body(PA, N))
    check(a.join() == ref and a.tokens == N, "after the hang-up: the same text as before")
finally:
    rc = srv.close()
    check(rc == 0, "server exit status 0 (%s)" % rc)
check.finish()
