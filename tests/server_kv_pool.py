"""helix-bg serve on a shared KV pool of pages (the CPU with --parallel > 1):
4 slots and -c 256, where fixed slots would give each request 64 positions.

 - /metrics reports the pool: 16 pages of 16 positions, pages in use;
 - a request of 160 positions (a 120-token prompt) runs beside three short
   ones at once, every text equal to the same request alone;
 - two requests that each fit but together outgrow the pool: both are
   admitted, one ends early with finish_reason "length" when no page is left
   (its text a prefix of its text alone), the other runs to max_tokens with
   the text it has alone, and the server goes on serving;
 - a request that the pool cannot hold beside a running one waits in the
   queue and then runs; with --no-queue it gets 429 instead, and 200 once the
   pool is free again.
Prompts are token ids, so every length is exact."""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import Checks, Server, log, synth_model  # noqa: E402

check = Checks()
model = synth_model()
ARGS = ["-m", model, "-np", "4", "-c", "256", "-t", "2", "--timeout", "300"]


def ids(n, seed):
    """n token ids in 100..899 (plain text tokens of the synthetic vocabulary), fixed by seed."""
    x, out = seed, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(100 + (x >> 8) % 800)
    return out


def complete(srv, prompt, n, out=None):
    """A greedy /v1/completions: (status, text, finish_reason, completion tokens, body)."""
    st, j = srv.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0,
                                                  "ignore_eos": True}, timeout=240)
    res = (st, None, None, None, j)
    if st == 200:
        ch = j["choices"][0]
        res = (st, ch["text"], ch["finish_reason"], j["usage"]["completion_tokens"], j)
    if out is not None:
        out.append(res)
    return res


def together(srv, reqs):
    """Runs (prompt, n) requests at once, each on its own thread; their results in order."""
    outs = [[] for _ in reqs]
    th = [threading.Thread(target=complete, args=(srv, p, n, outs[i])) for i, (p, n) in enumerate(reqs)]
    for t in th:
        t.start()
    for t in th:
        t.join(300)
    return [o[0] if o else (None, None, None, None, None) for o in outs]


srv = Server(ARGS)
try:
    m = srv.metrics()
    check(m.get("helix_kv_page_positions") == 16 and m.get("helix_kv_pages_total") == 16 and
          m.get("helix_kv_capacity_positions") == 256,
          "/metrics: a pool of 16 pages of 16 (%s, %s, %s)" % (m.get("helix_kv_page_positions"),
                                                               m.get("helix_kv_pages_total"),
                                                               m.get("helix_kv_capacity_positions")))

    # ---- one long request beside three short ones ----
    LONG = (ids(120, 1), 40)
    SHORT = [(ids(8, 10 + i), 6) for i in range(3)]
    got = together(srv, [LONG] + SHORT)
    check(all(g[0] == 200 for g in got), "long + 3 short at once: statuses %s" % [g[0] for g in got])
    check(got[0][3] == 40 and got[0][2] == "length", "the long request: %s tokens, %s" % (got[0][3], got[0][2]))
    m = srv.metrics()
    check(0 < m.get("helix_kv_pages_used", 0) <= 16, "pages in use after the run: %s" % m.get("helix_kv_pages_used"))
    check(srv.idle(60), "idle after the mixed run")
    alone = [complete(srv, p, n) for p, n in [LONG] + SHORT]
    for i, (g, a) in enumerate(zip(got, alone)):
        check(g[1] is not None and g[1] == a[1] and g[3] == a[3],
              "request %d: the same text beside the others as alone (%s / %s tokens)" % (i, g[3], a[3]))
    log("long (160 positions) + 3 short in a pool of 256 with 4 slots: texts equal alone")

    # ---- two requests that outgrow the pool together: one ends with "length" ----
    A, B = (ids(60, 21), 180), (ids(60, 22), 180)
    ga, gb = together(srv, [A, B])
    check(ga[0] == 200 and gb[0] == 200, "pool outgrown: statuses %s %s (%s %s)" % (ga[0], gb[0], ga[4], gb[4]))
    check(srv.idle(60), "idle after the outgrown run")
    ra, rb = complete(srv, *A), complete(srv, *B)
    if ga[0] == 200 and gb[0] == 200:
        cut, full = (ga, gb) if ga[3] < gb[3] else (gb, ga)
        rcut, rfull = (ra, rb) if cut is ga else (rb, ra)
        check(cut[3] < 180 and cut[2] == "length", "one request ended early: %s tokens, %s" % (cut[3], cut[2]))
        check(full[3] == 180 and full[1] == rfull[1], "the other ran to max_tokens with its text alone (%s tokens)"
              % full[3])
        check(rcut[3] == 180 and rcut[1].startswith(cut[1]), "the early one's text is a prefix of its text alone")
        log("pool outgrown: one request ended at %d tokens with \"length\", the other ran to 180" % cut[3])
    st, _, _ = srv.request("GET", "/health")
    check(st == 200, "healthy after the pool filled up")

    # ---- a request the pool cannot hold yet: queued, then run ----
    X, Y = (ids(150, 31), 60), (ids(150, 32), 60)
    results, depth = [[], []], [0]
    tx = threading.Thread(target=complete, args=(srv, X[0], X[1], results[0]))
    tx.start()
    time.sleep(0.05)
    ty = threading.Thread(target=complete, args=(srv, Y[0], Y[1], results[1]))
    ty.start()
    while tx.is_alive() or ty.is_alive():
        depth[0] = max(depth[0], int(srv.metrics().get("helix_queue_depth", 0)))
        time.sleep(0.01)
    check(depth[0] >= 1, "the second 210-position request waited in the queue (depth seen %d)" % depth[0])
    gx, gy = results[0][0], results[1][0]
    check(gx[0] == 200 and gy[0] == 200 and gx[3] == 60 and gy[3] == 60, "both ran: %s %s" % (gx[0], gy[0]))
    check(gy[1] == complete(srv, *Y)[1], "the queued request's text equals it alone")
finally:
    rc = srv.close()
    check(rc == 0, "server exit status 0 (%s)" % rc)

# ---- --no-queue: 429 while the pool cannot hold the prompt, 200 after ----
srv = Server(ARGS + ["--no-queue"])
try:
    stream_done = threading.Event()

    def long_stream():
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=240)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": ids(150, 41), "max_tokens": 100,
                                                              "temperature": 0, "ignore_eos": True,
                                                              "stream": True}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        while True:
            line = r.readline()
            if not line or line.strip() == b"data: [DONE]":
                break
            if line.startswith(b"data: ") and b'"text"' in line:
                first.set()
        c.close()
        stream_done.set()

    first = threading.Event()
    t = threading.Thread(target=long_stream)
    t0 = time.time()
    t.start()
    check(first.wait(120), "the long stream is under way")
    st, j = srv.json("POST", "/v1/completions", {"prompt": ids(150, 42), "max_tokens": 20, "temperature": 0})
    busy = not stream_done.is_set()
    log("--no-queue: asked %.3f s after the stream started, the stream %s" %
        (time.time() - t0, "still running" if busy else "already done"))
    check(not busy or (st == 429 and "KV" in json.dumps(j)),
          "--no-queue, pool short: %s %s" % (st, json.dumps(j)[:200]))
    t.join(240)
    check(srv.idle(60), "idle after the long stream")
    st, j = srv.json("POST", "/v1/completions", {"prompt": ids(150, 42), "max_tokens": 20, "temperature": 0})
    check(st == 200, "--no-queue, pool free again: %s" % st)
finally:
    rc = srv.close()
    check(rc == 0, "server exit status 0 (%s)" % rc)
check.finish()
