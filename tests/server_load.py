"""Load generator for helix-bg serve (or any OpenAI-compatible server): N
concurrent streaming clients, each sending requests back to back for a fixed
time. Reports requests/s, aggregate generated tokens/s, time to first token
and inter-token latency (p50 / p99) per concurrency level, as a table or
JSON lines. Loopback HTTP only, standard library only, bounded in time.

  python3 tests/server_load.py --url http://127.0.0.1:8080 --model M \\
      --concurrency 1,4,8 --seconds 20 --prompt-tokens 128 --max-tokens 128 [--jsonl]

Token counts come from the stream's usage chunk (stream_options.include_usage),
so every server that honours it is measured the same way."""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse


def one_request(host, port, body, headers, timeout):
    """Streams one completion; returns (ttft_s, [inter-token gaps], completion_tokens)."""
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers=headers)
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:200]))
    ttft, last, gaps, tokens = None, None, [], 0
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            data = ev[6:] if ev.startswith(b"data: ") else b""
            if data == b"[DONE]":
                c.close()
                return ttft, gaps, tokens
            obj = json.loads(data)
            if obj.get("usage"):
                tokens = obj["usage"]["completion_tokens"]
            if obj.get("choices") and obj["choices"][0].get("text"):
                now = time.perf_counter()
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
    c.close()
    return ttft, gaps, tokens


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def run_level(args, n):
    u = urllib.parse.urlparse(args.url)
    host, port = u.hostname, u.port or 80
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key
    words = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor " * 64).split()
    lock = threading.Lock()
    res = {"ttft": [], "gaps": [], "tokens": 0, "requests": 0, "errors": 0}
    stop_at = time.perf_counter() + args.seconds

    def client(i):
        k = 0
        while time.perf_counter() < stop_at:
            # a distinct prompt per request (no prefix reuse across clients beyond the first words)
            prompt = "%d %d " % (i, k) + " ".join(words[: max(1, args.prompt_tokens - 4)])
            body = json.dumps({**({"model": args.model} if args.model else {}), "prompt": prompt, "max_tokens": args.max_tokens,
                               "temperature": 0, "ignore_eos": True, "stream": True,
                               "stream_options": {"include_usage": True}})
            try:
                ttft, gaps, tokens = one_request(host, port, body, headers, args.timeout)
                with lock:
                    if ttft is not None:
                        res["ttft"].append(ttft)
                    res["gaps"].extend(gaps)
                    res["tokens"] += tokens
                    res["requests"] += 1
            except Exception as x:  # noqa: BLE001 - counted and shown
                with lock:
                    res["errors"] += 1
                    first = res["errors"] == 1
                if first:
                    print("error (first of this level):", x, file=sys.stderr)
                time.sleep(0.1)
            k += 1

    t0 = time.perf_counter()
    th = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    [t.start() for t in th]
    [t.join(args.seconds + args.timeout + 10) for t in th]
    wall = time.perf_counter() - t0
    return {"concurrency": n, "seconds": round(wall, 2), "requests": res["requests"], "errors": res["errors"],
            "req_per_s": round(res["requests"] / wall, 3), "tok_per_s": round(res["tokens"] / wall, 1),
            "ttft_p50_ms": round(pct(res["ttft"], 50) * 1e3, 1), "ttft_p99_ms": round(pct(res["ttft"], 99) * 1e3, 1),
            "itl_p50_ms": round(pct(res["gaps"], 50) * 1e3, 2), "itl_p99_ms": round(pct(res["gaps"], 99) * 1e3, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--prompt-tokens", type=int, default=128, help="approximate (words)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--jsonl", action="store_true")
    args = ap.parse_args()
    if not args.url.startswith("http://127.0.0.1") and not args.url.startswith("http://localhost"):
        sys.exit("server_load: loopback URLs only (%s)" % args.url)
    if not args.jsonl:
        print("%5s %8s %9s %10s %10s %10s %10s %7s" % ("conc", "req/s", "tok/s", "ttft p50", "ttft p99",
                                                          "itl p50", "itl p99", "errors"))
    for n in [int(x) for x in args.concurrency.split(",")]:
        r = run_level(args, n)
        if args.jsonl:
            print(json.dumps(r), flush=True)
        else:
            print("%5d %8.2f %9.1f %8.1fms %8.1fms %8.2fms %8.2fms %7d" % (
                n, r["req_per_s"], r["tok_per_s"], r["ttft_p50_ms"], r["ttft_p99_ms"], r["itl_p50_ms"],
                r["itl_p99_ms"], r["errors"]), flush=True)


if __name__ == "__main__":
    main()
