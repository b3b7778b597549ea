"""helix-bg serve over plain HTTP (curl and raw sockets): auth, routes and
error shapes, request limits, SSE framing, cancellation on client disconnect
(the slot is freed: /metrics), queueing and --no-queue, CORS, hostile input
(malformed JSON, invalid UTF-8, huge bodies, thousands of idle connections,
slow-loris clients) and graceful shutdown on SIGTERM."""
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import Checks, Server, log, synth_model  # noqa: E402

check = Checks()
KEY = "sk-test-123"
AUTH = {"Authorization": "Bearer " + KEY}
model = synth_model()
srv = Server(["-m", model, "-np", "2", "-c", "4096", "-t", "2", "--api-key", KEY, "--max-body", "65536",
              "--idle-timeout", "2", "--timeout", "60", "--max-prompt", "1000"])
port = srv.port


def err_shape(body, code=None):
    e = body.get("error") if isinstance(body, dict) else None
    ok = isinstance(e, dict) and isinstance(e.get("message"), str) and isinstance(e.get("type"), str) and "code" in e
    return ok and (code is None or e["code"] == code)


def curl(args, timeout=60):
    p = subprocess.run(["curl", "-sS", "-N", "--max-time", str(timeout)] + args, capture_output=True, timeout=timeout + 5)
    return p.returncode, p.stdout


def sse_events(raw):
    """Splits an SSE body into event payloads; checks the framing strictly."""
    text = raw.decode("utf-8")  # strict: every byte valid UTF-8
    assert text.endswith("\n\n"), "stream does not end with a blank line"
    events = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: ") and "\n" not in block, "bad SSE block %r" % block[:80]
        events.append(block[6:])
    return events


try:
    # ---- auth and routes ----
    st, h, b = srv.request("GET", "/health")
    check(st == 200 and json.loads(b)["status"] == "ok", "/health open without a key")
    st, body = srv.json("GET", "/v1/models")
    check(st == 401 and err_shape(body, "invalid_api_key"), "no key: 401 OpenAI error (%s %s)" % (st, body))
    st, h, _ = srv.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
    check(st == 401 and h.get("www-authenticate") == "Bearer", "wrong key: 401 with WWW-Authenticate")
    st, body = srv.json("GET", "/v1/models", headers=AUTH)
    check(st == 200 and body["data"][0]["id"] == "server-test-smol", "models lists the model id (%s)" % body)
    st, body = srv.json("GET", "/v1/models/server-test-smol", headers=AUTH)
    check(st == 200 and body["id"] == "server-test-smol", "GET /v1/models/ID")
    st, body = srv.json("GET", "/v1/models/nope", headers=AUTH)
    check(st == 404 and err_shape(body, "model_not_found"), "unknown model id: 404")
    st, body = srv.json("GET", "/v2/nothing", headers=AUTH)
    check(st == 404 and err_shape(body), "unknown route: 404")
    st, h, b = srv.request("GET", "/v1/chat/completions", headers=AUTH)
    check(st == 405 and h.get("allow") == "POST" and err_shape(json.loads(b)), "GET on a POST route: 405 with Allow")
    st, h, _ = srv.request("OPTIONS", "/v1/chat/completions", headers=AUTH)
    check(st == 405 and "access-control-allow-origin" not in h, "CORS off by default")

    # ---- bad requests ----
    chat = "/v1/chat/completions"
    for what, body, code in [
        ("malformed JSON", b'{"messages": [', "invalid_json"),
        ("trailing bytes", b'{"messages": []} x', "invalid_json"),
        ("not an object", b'[1, 2]', "invalid_json"),
        ("invalid UTF-8", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "invalid_encoding"),
        ("no messages", b'{"model": "server-test-smol"}', "invalid_value"),
        ("max_tokens type", b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "9"}', "invalid_type"),
        ("temperature range", b'{"messages": [{"role": "user", "content": "hi"}], "temperature": -1}', "invalid_value"),
        ("bad role", b'{"messages": [{"role": "wizard", "content": "hi"}]}', "invalid_value"),
        ("logit_bias key", b'{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"x": 1}}', "invalid_value"),
    ]:
        st, _, b = srv.request("POST", chat, body=body, headers=AUTH)
        try:
            parsed = json.loads(b.decode("utf-8"))
        except ValueError:
            parsed = None
        check(st == 400 and err_shape(parsed, code), "%s: 400 %s (%s %s)" % (what, code, st, b[:200]))
    st, body = srv.json("POST", chat, {"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}, AUTH)
    check(st == 404 and err_shape(body, "model_not_found"), "unknown model: 404")
    st, body = srv.json("POST", chat, {"messages": [{"role": "user", "content": "word " * 1500}]}, AUTH)
    check(st == 400 and err_shape(body, "context_length_exceeded"), "too long prompt: 400 context_length_exceeded")
    st, body = srv.json("POST", chat, {"messages": [{"role": "user", "content": "x" * 70000}]}, AUTH)
    check(st == 413 and err_shape(body, "request_too_large"), "body over --max-body: 413 (%s)" % st)

    # ---- a normal request, the same streamed: identical text, strict SSE framing ----
    req = {"model": "server-test-smol", "messages": [{"role": "user", "content": "Tell me a story."}],
           "max_tokens": 24, "temperature": 0}
    st, full = srv.json("POST", chat, req, AUTH)
    check(st == 200 and full["object"] == "chat.completion" and full["choices"][0]["finish_reason"] in ("stop", "length"),
          "chat completion (%s)" % st)
    text = full["choices"][0]["message"]["content"]
    check(full["usage"]["completion_tokens"] > 0, "usage counts tokens")
    rc, raw = curl(["-H", "Authorization: Bearer " + KEY, "-H", "Content-Type: application/json", "-D", "/dev/stderr",
                    "-d", json.dumps(dict(req, stream=True, stream_options={"include_usage": True})), srv.url(chat)])
    ev = sse_events(raw)
    check(ev[-1] == "[DONE]", "stream ends with data: [DONE]")
    chunks = [json.loads(e) for e in ev[:-1]]
    check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "first chunk carries the role")
    fin = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    check(len(fin) == 1 and fin[0]["choices"][0]["finish_reason"] == full["choices"][0]["finish_reason"],
          "one chunk with the finish reason")
    check(chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == full["usage"]["completion_tokens"],
          "include_usage: a last chunk with usage")
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    check(streamed == text, "streamed text == non-stream text (%r vs %r)" % (streamed, text))
    check(all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks), "chunk ids")

    # ---- every body and chunk valid UTF-8, with sampled (arbitrary) tokens ----
    bad = 0
    for seed in range(6):
        rc, raw = curl(["-H", "Authorization: Bearer " + KEY, "-d", json.dumps(
            {"prompt": "abc", "max_tokens": 40, "temperature": 1.5, "top_k": 0, "top_p": 1, "min_p": 0, "seed": seed,
             "stream": seed % 2 == 0}), srv.url("/v1/completions")])
        try:
            if seed % 2 == 0:
                for e in sse_events(raw)[:-1]:
                    json.loads(e)
            else:
                json.loads(raw.decode("utf-8"))
        except (ValueError, AssertionError) as x:
            bad += 1
            log("invalid output:", x, raw[:200])
    check(bad == 0, "sampled outputs are valid UTF-8 JSON / SSE")

    # ---- stop strings (text before the first match, never the stop string) ----
    st, base = srv.json("POST", "/v1/completions", {"prompt": "1 2 3", "max_tokens": 30, "temperature": 0}, AUTH)
    btext = base["choices"][0]["text"]
    if len(btext) >= 6:
        stop = btext[3:6]
        st, sb = srv.json("POST", "/v1/completions", {"prompt": "1 2 3", "max_tokens": 30, "temperature": 0,
                                                      "stop": [stop]}, AUTH)
        cut = btext[:btext.find(stop)]
        check(sb["choices"][0]["text"] == cut and sb["choices"][0]["finish_reason"] == "stop",
              "stop string cuts the text (%r -> %r, want %r)" % (btext, sb["choices"][0]["text"], cut))
        rc, raw = curl(["-H", "Authorization: Bearer " + KEY, "-d", json.dumps(
            {"prompt": "1 2 3", "max_tokens": 30, "temperature": 0, "stop": stop, "stream": True}),
            srv.url("/v1/completions")])
        stext = "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(raw)[:-1])
        check(stext == cut, "streamed stop string held back (%r, want %r)" % (stext, cut))
    else:
        log("note: the greedy text is too short for the stop-string check")

    # ---- tokenize / detokenize ----
    st, t = srv.json("POST", "/tokenize", {"content": "hello world"}, AUTH)
    st2, d = srv.json("POST", "/detokenize", {"tokens": t["tokens"]}, AUTH)
    check(st == 200 and st2 == 200 and d["content"] == "hello world", "tokenize/detokenize round trip (%s)" % d)
    st, body = srv.json("POST", "/detokenize", {"tokens": [10 ** 9]}, AUTH)
    check(st == 400 and err_shape(body), "detokenize: id out of range is 400")

    # ---- cancellation: kill the client mid-stream, the slot is freed at once ----
    m0 = srv.metrics(AUTH)
    long_req = json.dumps({"prompt": "Once upon a time", "max_tokens": 1900, "temperature": 0, "stream": True})
    p = subprocess.Popen(["curl", "-sS", "-N", "-H", "Authorization: Bearer " + KEY, "-d", long_req,
                          srv.url("/v1/completions")], stdout=subprocess.PIPE)
    got = p.stdout.read(600)          # a few chunks have arrived
    busy = srv.metrics(AUTH)["helix_slots_busy"]
    p.kill()
    p.wait()
    t0 = time.time()
    freed = None
    while time.time() - t0 < 5:
        m = srv.metrics(AUTH)
        if m["helix_slots_busy"] == 0:
            freed = time.time() - t0
            break
        time.sleep(0.02)
    check(len(got) == 600 and busy == 1, "the stream was running in a slot (busy %s)" % busy)
    check(freed is not None and freed < 1.0, "killed client: slot freed in %s s" % freed)
    m1 = srv.metrics(AUTH)
    check(m1["helix_requests_cancelled_total"] == m0["helix_requests_cancelled_total"] + 1, "cancel counted in /metrics")
    check(m1["helix_tokens_generated_total"] - m0["helix_tokens_generated_total"] < 1900, "generation stopped early")

    # the same for a non-stream request: the socket closes while the connection is suspended
    m0 = m1
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 1900, "temperature": 0}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    t0 = time.time()
    while time.time() - t0 < 5 and srv.metrics(AUTH)["helix_slots_busy"] == 0:
        time.sleep(0.01)
    s.close()
    t0 = time.time()
    freed = None
    while time.time() - t0 < 5:
        if srv.metrics(AUTH)["helix_slots_busy"] == 0:
            freed = time.time() - t0
            break
        time.sleep(0.02)
    m1 = srv.metrics(AUTH)
    check(freed is not None and freed < 1.0 and
          m1["helix_requests_cancelled_total"] == m0["helix_requests_cancelled_total"] + 1,
          "non-stream client gone: slot freed in %s s" % freed)

    # ---- more requests than slots: queued, all answered; batched greedy == alone ----
    prompts = ["The cat", "A dog ran", "Numbers: 1 2", "Hello there friend", "Why is the sky"]
    alone = []
    for pr in prompts:
        st, b = srv.json("POST", "/v1/completions", {"prompt": pr, "max_tokens": 16, "temperature": 0}, AUTH)
        alone.append(b["choices"][0]["text"])
    together = [None] * len(prompts)

    def run(i):
        st, b = srv.json("POST", "/v1/completions", {"prompt": prompts[i], "max_tokens": 16, "temperature": 0}, AUTH)
        together[i] = b["choices"][0]["text"] if st == 200 else "HTTP %d" % st

    th = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    [t.start() for t in th]
    [t.join(60) for t in th]
    check(together == alone, "concurrent greedy outputs equal the outputs alone\n  %r\n  %r" % (together, alone))
    m = srv.metrics(AUTH)
    check(m["helix_prompt_tokens_cached_total"] > 0, "repeated prompts reuse cached prefixes")

    # ---- hostile input ----
    # a huge announced body: 413 before it is read
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Length: 1000000000\r\n\r\n" + b"{" * 1000)
    resp = s.recv(4096)
    s.close()
    check(resp.startswith(b"HTTP/1.1 413"), "Content-Length 1e9: 413 at once (%r)" % resp[:40])
    # a chunked body that never stops: refused, connection closed, server fine
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    resp = b""
    try:
        for _ in range(200):
            s.sendall(b"1000\r\n" + b"a" * 4096 + b"\r\n")
        s.sendall(b"0\r\n\r\n")
        resp = s.recv(4096)
    except OSError:
        pass
    s.close()
    check(resp == b"" or resp.startswith(b"HTTP/1.1 413") or resp.startswith(b"HTTP/1.1 401"),
          "endless chunked body refused (%r)" % resp[:40])
    check(srv.alive(), "alive after huge bodies")

    # thousands of idle connections while others are served
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = int(os.environ.get("HX_SERVE_IDLE_CONNS", "10000"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    n_idle = max(100, min(want, hard - 200))
    idle = []
    try:
        for i in range(n_idle):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
    except OSError as x:
        log("opened %d idle connections (%s)" % (len(idle), x))
    t0 = time.time()
    st, body = srv.json("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 4}, AUTH, timeout=30)
    check(st == 200, "served with %d idle connections open (%.2f s)" % (len(idle), time.time() - t0))
    for c in idle:
        c.close()
    log("idle connections: %d" % len(idle))

    # slow-loris: headers one byte at a time; others are served meanwhile; a silent one is closed
    slow = []
    for i in range(20):
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\n")
        slow.append(c)
    served = 0
    for k in range(8):
        for c in slow:
            try:
                c.sendall(b"X")
            except OSError:
                pass
        st, _, _ = srv.request("GET", "/health", timeout=5)
        served += st == 200
        time.sleep(0.25)
    check(served == 8, "served while slow clients trickle headers")
    quiet = socket.create_connection(("127.0.0.1", port), timeout=10)
    quiet.sendall(b"GET /health HTTP/1.1\r\nHo")
    t0 = time.time()
    closed = quiet.recv(100) == b""
    check(closed and time.time() - t0 < 6, "an idle half-sent request is closed after --idle-timeout (%.1f s)" %
          (time.time() - t0))
    for c in slow + [quiet]:
        c.close()
    check(srv.alive(), "alive after slow clients")

    # metrics names
    m = srv.metrics(AUTH)
    for name in ["helix_requests_total", "helix_tokens_generated_total", "helix_queue_depth", "helix_batch_sequences",
                 "helix_tokens_per_second", "helix_kv_used_positions", "helix_kv_usage_ratio", "helix_slots_busy"]:
        check(name in m, "/metrics has " + name)
    text = srv.log_text()
    check(" POST /v1/completions 200 " in text and "finish=cancelled" in text, "one log line per request")
finally:
    rc = srv.stop()
check(rc == 0, "SIGTERM: exit 0 (got %s)" % rc)
srv.close()

# ---- --no-queue, CORS, shutdown with a stream in flight ----
srv = Server(["-m", model, "-np", "1", "-c", "2048", "-t", "2", "--timeout", "1.5"])
try:
    t0 = time.time()
    st, body = srv.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1900, "temperature": 0})
    took = time.time() - t0
    check(st == 200 and body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] < 1900
          and took < 4, "--timeout 1.5: the answer so far, finish length (%.1f s, %s tokens)" %
          (took, body.get("usage", {}).get("completion_tokens")))
finally:
    check(srv.close() == 0, "--timeout server: exit 0")

srv = Server(["-m", model, "-np", "1", "-c", "2048", "-t", "2", "--no-queue", "--cors", "http://example.test",
              "--shutdown-timeout", "1"])
try:
    st, h, _ = srv.request("OPTIONS", "/v1/chat/completions", headers={"Origin": "http://example.test"})
    check(st == 204 and h.get("access-control-allow-origin") == "http://example.test", "--cors: preflight 204")
    st, h, _ = srv.request("GET", "/v1/models")
    check(h.get("access-control-allow-origin") == "http://example.test", "--cors: header on answers")
    p = subprocess.Popen(["curl", "-sS", "-N", "-d", json.dumps({"prompt": "x", "max_tokens": 1900, "stream": True}),
                          srv.url("/v1/completions")], stdout=subprocess.PIPE)
    first = p.stdout.read(100)
    st, body = srv.json("POST", "/v1/completions", {"prompt": "y", "max_tokens": 4})
    check(st == 429 and err_shape(body), "--no-queue: 429 when the slot is busy (%s %s)" % (st, body))
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    rest = p.stdout.read()
    p.wait(20)
    rc = srv.proc.wait(20)
    took = time.time() - t0
    ev = sse_events(first + rest)
    check(ev[-1] == "[DONE]", "SIGTERM: the running stream is ended properly")
    check(rc == 0 and took < 6, "SIGTERM: exit 0 within the deadline (%s, %.1f s)" % (rc, took))
finally:
    check(srv.close() == 0, "exit 0")
check.finish()
