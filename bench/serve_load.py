#!/usr/bin/env python3
"""serve_load.py — an end-to-end load test of an OpenAI-compatible server
(helix-bg serve, llama-server): C concurrent streams of /v1/completions with
stream: true, each request a fixed-length prompt and a fixed number of
generated tokens (ignore_eos), on loopback. Standard library only (asyncio
raw HTTP/1.1), so it runs on a bare machine.

Per concurrency level it reports requests/s, generated tokens/s (the server's
usage count, asked with stream_options.include_usage), time to first token
(TTFT) p50/p99 and inter-token latency (ITL: gaps between streamed text
chunks) p50/p99, and the mean tokens per request (a prompt that leaves a slot
too little room ends early with finish_reason "length") and prompt tokens per
request (both servers' usage: the same prompts must tokenize alike), as a
table and, with --jsonl FILE, one line per level for bench/results.jsonl.

usage: serve_load.py --port 8080 [--host 127.0.0.1] [--concurrency 1,8,32,128]
                     [--requests 0] [--seconds 20] [--prompt-words 100]
                     [--max-tokens 128] [--engine helix] [--model NAME] [--label L]
                     [--jsonl FILE] [--commit C] [--device D] [--settings S] [--warmup]

--warmup first runs, unrecorded, one request per stream of the largest level
with 8 tokens each (CUDA graphs captured, slots touched) before the levels.
bench/serve_peer.sh runs this against helix-bg serve and llama-server in turn.
"""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time

WORDS = ("the of and to in is was for on that with as by at from this be are or an it have not which "
         "time system model memory request server token batch queue cache page kernel thread value "
         "result error file entry topic note index search query answer point level number").split()


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


async def one_request(host, port, body, api_key):
    """Send one streamed completion; return (ttft_s, [gaps between text chunks], tokens) or raise."""
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    data = json.dumps(body).encode()
    hdr = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(data)}\r\nConnection: close\r\n")
    if api_key:
        hdr += f"Authorization: Bearer {api_key}\r\n"
    writer.write(hdr.encode() + b"\r\n" + data)
    await writer.drain()
    status = await reader.readline()
    if b" 200" not in status:
        rest = await reader.read(2000)
        writer.close()
        raise RuntimeError(f"HTTP {status.decode(errors='replace').strip()}: {rest[:300]!r}")
    chunked = False
    while True:  # headers
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
            chunked = True
    times = []
    usage = [None, None]  # completion_tokens, prompt_tokens from the final chunk (stream_options.include_usage)
    buf = b""
    done = False

    async def feed():
        if chunked:
            size_line = await reader.readline()
            if not size_line:
                return None
            n = int(size_line.strip().split(b";")[0] or b"0", 16)
            if n == 0:
                return None
            chunk = await reader.readexactly(n)
            await reader.readline()
            return chunk
        chunk = await reader.read(65536)
        return chunk or None

    while not done:
        chunk = await feed()
        if chunk is None:
            break
        now = time.perf_counter()
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                try:
                    j = json.loads(payload)
                except ValueError:
                    continue
                if isinstance(j.get("usage"), dict) and j["usage"].get("completion_tokens") is not None:
                    usage[0] = int(j["usage"]["completion_tokens"])
                    usage[1] = j["usage"].get("prompt_tokens")
                ch = j.get("choices") or []
                if ch and (ch[0].get("text") or (ch[0].get("delta") or {}).get("content")):
                    times.append(now)
    writer.close()
    if not times:
        raise RuntimeError("no tokens streamed")
    ttft = times[0] - t0
    itl = [b - a for a, b in zip(times, times[1:])]
    # tokens: the server's count when it sent usage; else the chunks with text (a
    # token whose bytes are held back as an incomplete character sends no chunk)
    return ttft, itl, usage[0] if usage[0] is not None else len(times), usage[1]


async def level(args, conc, warmup=False):
    rnd = random.Random(1234 + conc)
    deadline = time.perf_counter() + args.seconds
    budget = [conc if warmup else args.requests if args.requests > 0 else 1 << 30]
    max_tokens = 8 if warmup else args.max_tokens
    ttfts, itls, ntok, errors, ptok = [], [], [0], [], []
    started = time.perf_counter()

    async def worker(w):
        while time.perf_counter() < deadline and budget[0] > 0:
            budget[0] -= 1
            prompt = " ".join(rnd.choice(WORDS) for _ in range(args.prompt_words))
            body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True,
                    "temperature": 0, "ignore_eos": True,
                    "stream_options": {"include_usage": True}}
            if args.model:
                body["model"] = args.model
            try:
                t, i, n, p = await one_request(args.host, args.port, body, args.api_key)
            except Exception as ex:  # noqa: BLE001 — counted and reported
                errors.append(str(ex))
                await asyncio.sleep(0.05)
                continue
            ttfts.append(t)
            itls.extend(i)
            ntok[0] += n
            if p is not None:
                ptok.append(int(p))

    await asyncio.gather(*(worker(w) for w in range(conc)))
    if warmup:
        return {"requests": len(ttfts), "errors": len(errors), "first_error": errors[0] if errors else ""}
    wall = time.perf_counter() - started
    return {"concurrency": conc, "requests": len(ttfts), "errors": len(errors), "first_error": errors[0] if errors else "",
            "wall_s": wall, "req_per_s": len(ttfts) / wall, "tokens_per_s": ntok[0] / wall,
            "ttft_p50_ms": 1e3 * pct(ttfts, 50), "ttft_p99_ms": 1e3 * pct(ttfts, 99),
            "itl_p50_ms": 1e3 * pct(itls, 50), "itl_p99_ms": 1e3 * pct(itls, 99),
            "itl_mean_ms": 1e3 * (statistics.fmean(itls) if itls else float("nan")),
            "tokens_per_request": ntok[0] / len(ttfts) if ttfts else float("nan"),
            "prompt_tokens_per_request": statistics.fmean(ptok) if ptok else float("nan")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--concurrency", default="1,8,32,128")
    ap.add_argument("--requests", type=int, default=0, help="requests per level (0: until --seconds)")
    ap.add_argument("--seconds", type=float, default=20.0, help="time bound per level")
    ap.add_argument("--prompt-words", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--engine", default="helix")
    ap.add_argument("--model", default="", help="the request's model field (default: none sent)")
    ap.add_argument("--label", default="", help="the model's name in the results (default: --model)")
    ap.add_argument("--device", default="")
    ap.add_argument("--commit", default="")
    ap.add_argument("--settings", default="", help="the server's settings, recorded in each row")
    ap.add_argument("--warmup", action="store_true", help="unrecorded requests first (see above)")
    ap.add_argument("--jsonl", default="")
    args = ap.parse_args()
    try:
        levels = [int(x) for x in args.concurrency.split(",")]
    except ValueError:
        ap.error(f"--concurrency: '{args.concurrency}' is not a list of integers")
    out = open(args.jsonl, "a") if args.jsonl else None
    if args.warmup:
        w = asyncio.run(level(args, max(levels), warmup=True))
        print(f"warmup: {w['requests']} requests, {w['errors']} errors", flush=True)
        if w["errors"]:
            print(f"  first error: {w['first_error'][:200]}", file=sys.stderr)
    print(f"{'engine':<12}{'conc':>5}{'req':>6}{'err':>5}{'req/s':>8}{'tok/s':>9}{'ttft p50':>10}{'p99':>9}"
          f"{'itl p50':>9}{'p99':>8}{'tok/req':>8}{'prompt':>7}  (ms)")
    for c in levels:
        r = asyncio.run(level(args, c))
        print(f"{args.engine:<12}{c:>5}{r['requests']:>6}{r['errors']:>5}{r['req_per_s']:>8.2f}{r['tokens_per_s']:>9.1f}"
              f"{r['ttft_p50_ms']:>10.1f}{r['ttft_p99_ms']:>9.1f}{r['itl_p50_ms']:>9.2f}{r['itl_p99_ms']:>8.2f}{r['tokens_per_request']:>8.1f}"
              f"{r['prompt_tokens_per_request']:>7.0f}", flush=True)
        if r["errors"]:
            print(f"  first error: {r['first_error'][:200]}", file=sys.stderr)
        if out:
            row = {"date": time.strftime("%Y-%m-%d"), "commit": args.commit, "device": args.device, "engine": args.engine,
                   "model": args.label or args.model, "mix": f"serve-load p{args.prompt_words}w g{args.max_tokens}",
                   "test": "serve_load", "tokens_per_s": round(r["tokens_per_s"], 1), "concurrency": c}
            if args.settings:
                row["settings"] = args.settings
            row.update({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k not in ("first_error",)})
            out.write(json.dumps(row) + "\n")
    if out:
        out.close()


if __name__ == "__main__":
    main()
