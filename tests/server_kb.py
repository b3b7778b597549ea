"""helix-bg serve --kb over curl: POST /v1/kb/search ranks exactly as
`helix-bg search --json` does (ids, order, scores) for the same queries, the
topic filter, deleted entries never appear (at start, and after a delete
appended while the server runs), appended entries are found (embedded on the
fly, or counted as unindexed with --kb-max-embed 0), bad bodies get 400s in
OpenAI's error shape, "kb" on a server without --kb gets 400 kb_not_enabled,
an embedder that differs from the cache's is refused at start, and /metrics
counts the queries. The KB is generated here (tests do not depend on
examples/kb's contents)."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import BIN, Checks, Server, log, synth_model  # noqa: E402

check = Checks()

TOPICS = {
    "databases": ["postgres", "vacuum", "replica", "index", "transaction", "connection", "pool", "wal", "deadlock"],
    "networking": ["dns", "tls", "latency", "packet", "firewall", "route", "socket", "keepalive", "mtu"],
    "kubernetes": ["pod", "node", "helm", "ingress", "probe", "deployment", "namespace", "evicted", "kubelet"],
    "cooking": ["bread", "flour", "oven", "yeast", "dough", "salt", "butter", "sourdough", "crust"],
}
FILLER = ["the", "after", "when", "we", "saw", "again", "slow", "broken", "fixed", "notes", "check", "team"]


def make_kb(dir_):
    """~60 entries over 4 topics, one deleted, one malformed line; returns (entries by id, deleted id)."""
    rnd = random.Random(7)
    lines, off, ids = [], 0, {}
    deleted = None
    for i in range(60):
        topic = list(TOPICS)[i % 4]
        words = rnd.sample(TOPICS[topic], 3) + rnd.sample(FILLER, 4)
        rnd.shuffle(words)
        title = "%s %s (%d)" % (words[0], words[1], i)
        text = " ".join(words) + "."
        if i == 13:
            title, text = "zanzibar quokka incident", "the zanzibar quokka outage: unique words only here."
        e = {"topic": topic, "title": title, "text": text, "ts": "2026-10-%02dT09:00:00Z" % (1 + i % 28)}
        line = json.dumps(e) + "\n"
        ids[off] = e
        if i == 13:
            deleted = off
        lines.append(line)
        off += len(line.encode())
    lines.append('{"topic": "databases", "title": "torn wri\n')   # a crashed writer's fragment
    lines.append(json.dumps({"delete": deleted}) + "\n")
    with open(os.path.join(dir_, "data.log"), "w") as f:
        f.write("".join(lines))
    del ids[deleted]
    return ids, deleted


def curl(srv, path, body, method="POST"):
    """(status, parsed JSON or None) through curl."""
    args = ["curl", "-s", "-S", "-m", "60", "-o", "-", "-w", "\n%{http_code}", "-X", method,
            "-H", "Content-Type: application/json", srv.url(path)]
    if body is not None:
        args += ["--data-binary", body if isinstance(body, str) else json.dumps(body)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=90).stdout
    text, _, code = out.rpartition("\n")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    return int(code or 0), parsed


def cli_search(kb, query, k, topic=None):
    args = [BIN, "search", kb, query, "-k", str(k), "--json"]
    if topic:
        args += ["--topic", topic]
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout)


def err_shape(body, code):
    return isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("code") == code \
        and body["error"].get("type") == "invalid_request_error" and body["error"].get("message")


tmp = tempfile.mkdtemp(prefix="server-kb-")
kb = os.path.join(tmp, "kb")
os.mkdir(kb)
entries, deleted = make_kb(kb)
srv = plain = None
try:
    model = synth_model()
    # --ctx-seq 2048: the per-request limit the context-length checks below fill (the pool is shared)
    srv = Server(["-m", model, "--kb", kb, "-np", "2", "-c", "4096", "--ctx-seq", "2048", "-t", "2"])
    check("knowledge base" in srv.log_text() and "%d entries" % len(entries) in srv.log_text(),
          "the log names the KB and its %d live entries" % len(entries))

    # ---- the same ranking as the CLI ----
    queries = [("postgres vacuum slow", 5, None), ("dns tls latency", 10, None), ("pod evicted node", 3, None),
               ("sourdough crust", 8, None), ("slow", 7, "databases"), ("slow broken", 20, "KUBERNETES"),
               ("keepalive", 60, None), ("nothing-matches-this-xyzzy", 5, None)]
    for q, k, topic in queries:
        body = {"query": q, "k": k}
        if topic:
            body["topic"] = topic
        st, got = curl(srv, "/v1/kb/search", body)
        ref = cli_search(kb, q, k, topic)
        ok = st == 200 and got and got.get("object") == "list"
        if not check(ok, "search %r: 200 list (%s %s)" % (q, st, got)):
            continue
        g = [(h["id"], round(h["score"], 9), h["title"], h["topic"]) for h in got["data"]]
        r = [(h["id"], round(h["score"], 9), h["title"], h["topic"]) for h in ref["hits"]]
        check(g == r, "search %r k=%d topic=%s: the CLI's ranking\n  serve %s\n  cli   %s" % (q, k, topic, g, r))
        check(len(got["data"]) <= k, "at most k hits")
        check(all(h["snippet"] == c["snippet"] and h["bm25"] == c["bm25"] for h, c in zip(got["data"], ref["hits"])),
              "search %r: snippets and BM25 as the CLI's" % q)
        check(got["unindexed"] == 0 and got["entries"] == len(entries), "entries %d, unindexed 0 (%s, %s)"
              % (len(entries), got.get("entries"), got.get("unindexed")))
        if topic:
            check(all(h["topic"].lower() == topic.lower() for h in got["data"]) and got["data"],
                  "topic %s: only its entries" % topic)
        check(all(h["id"] != deleted for h in got["data"]), "the deleted entry never appears")
        check([h["rank"] for h in got["data"]] == list(range(1, len(got["data"]) + 1)), "ranks 1..n")
    st, got = curl(srv, "/v1/kb/search", {"query": "zanzibar quokka", "k": 60})
    check(st == 200 and all(h["id"] != deleted for h in got["data"]), "the deleted entry's own words do not find it")
    st, got = curl(srv, "/v1/kb/search", {"query": "slow", "k": 60, "topic": "cooking"})
    check(st == 200 and got["data"] and all(h["topic"] == "cooking" for h in got["data"]),
          "topic cooking: cooking entries only")
    st, got = curl(srv, "/v1/kb/search", {"query": "postgres", "topic": "no-such-topic"})
    check(st == 200 and got["data"] == [], "an unknown topic: no hits")
    st, sem = curl(srv, "/v1/kb/search", {"query": "postgres wal", "mode": "semantic", "k": 5})
    st2, lex = curl(srv, "/v1/kb/search", {"query": "postgres wal", "mode": "lexical", "k": 5})
    check(st == 200 and st2 == 200 and all(h["cosine"] is not None for h in sem["data"]) and
          lex["data"] and all(h["bm25"] > 0 for h in lex["data"]), "modes semantic and lexical")

    # ---- entries appended and deleted while the server runs ----
    with open(os.path.join(kb, "data.log"), "a") as f:
        f.write(json.dumps({"topic": "networking", "title": "frobnicator ZX-4411 quirk",
                            "text": "the frobnicator ZX-4411 drops packets after a firmware update"}) + "\n")
    st, got = curl(srv, "/v1/kb/search", {"query": "frobnicator ZX-4411", "k": 3})
    new_id = got["data"][0]["id"] if st == 200 and got["data"] else None
    check(new_id is not None and got["data"][0]["title"] == "frobnicator ZX-4411 quirk" and
          got["data"][0]["cosine"] is not None and got["unindexed"] == 0 and got["entries"] == len(entries) + 1,
          "an entry appended while serving is found, embedded on the fly (%s)" % (got,))
    with open(os.path.join(kb, "data.log"), "a") as f:
        f.write(json.dumps({"delete": new_id}) + "\n")
    st, got = curl(srv, "/v1/kb/search", {"query": "frobnicator ZX-4411", "k": 60})
    check(st == 200 and all(h["id"] != new_id for h in got["data"]) and got["entries"] == len(entries),
          "... and gone once deleted")

    # ---- bad requests ----
    for what, body, code in [
        ("not JSON", "{nope", "invalid_json"),
        ("not an object", "[1]", "invalid_json"),
        ("no query", {"k": 3}, "invalid_value"),
        ("empty query", {"query": ""}, "invalid_value"),
        ("query not a string", {"query": 5}, "invalid_value"),
        ("k zero", {"query": "dns", "k": 0}, "invalid_value"),
        ("k too big", {"query": "dns", "k": 100000}, "invalid_value"),
        ("k a string", {"query": "dns", "k": "3"}, "invalid_type"),
        ("k fractional", {"query": "dns", "k": 2.5}, "invalid_type"),
        ("topic a number", {"query": "dns", "topic": 3}, "invalid_type"),
        ("topic empty", {"query": "dns", "topic": ""}, "invalid_type"),
        ("bad mode", {"query": "dns", "mode": "psychic"}, "invalid_value"),
    ]:
        st, got = curl(srv, "/v1/kb/search", body)
        check(st == 400 and err_shape(got, code), "%s: 400 %s (%s %s)" % (what, code, st, got))
    st, got = curl(srv, "/v1/kb/search", None, method="GET")
    check(st == 405, "GET /v1/kb/search: 405 (%s)" % st)
    chat = "/v1/chat/completions"
    user = [{"role": "user", "content": "why is postgres slow?"}]
    for what, body, code in [
        ("kb not an object", {"messages": user, "kb": 5}, "invalid_type"),
        ("kb.k zero", {"messages": user, "kb": {"k": 0}}, "invalid_value"),
        ("kb.k a string", {"messages": user, "kb": {"k": "8"}}, "invalid_type"),
        ("kb.topic a number", {"messages": user, "kb": {"topic": 1}}, "invalid_type"),
        ("kb without a user message", {"messages": [{"role": "system", "content": "hi"}], "kb": {}}, "invalid_value"),
        ("kb with no room for entries", {"messages": user, "kb": {}, "max_tokens": 2040}, "context_length_exceeded"),
    ]:
        st, got = curl(srv, chat, body)
        check(st == 400 and err_shape(got, code), "chat %s: 400 %s (%s %s)" % (what, code, st, got))

    # ---- a grounded chat over curl: the prompt holds the search's best entries ----
    st, got = curl(srv, chat, {"messages": user, "kb": {"k": 4}, "max_tokens": 8, "temperature": 0})
    st2, hits = curl(srv, "/v1/kb/search", {"query": user[0]["content"], "k": 4})
    ok = st == 200 and isinstance(got.get("citations"), list) and isinstance(got.get("kb"), dict)
    if check(ok, "chat with kb: 200 with citations and kb (%s %s)" % (st, got)):
        ids = got["kb"]["ids"]
        check(ids == [h["id"] for h in hits["data"]][:len(ids)] and got["kb"]["retrieved"] == len(hits["data"]),
              "kb.ids are the search's best, in order (%s vs %s)" % (ids, hits["data"]))
        check(all(c["id"] in ids and ids[c["ref"] - 1] == c["id"] for c in got["citations"]),
              "citations only name entries in the prompt")
        check(got["usage"]["prompt_tokens"] > 100, "the entries are in the prompt (%d tokens)" % got["usage"]["prompt_tokens"])
    st, got = curl(srv, chat, {"messages": user, "kb": {"k": 4, "topic": "cooking"}, "max_tokens": 4})
    st2, hits = curl(srv, "/v1/kb/search", {"query": user[0]["content"], "k": 4, "topic": "cooking"})
    check(st == 200 and got["kb"]["ids"] == [h["id"] for h in hits["data"]][:len(got["kb"]["ids"])],
          "chat kb.topic: the topic's entries (%s)" % (got.get("kb"),))

    m = srv.metrics()
    check(m.get("helix_kb_search_requests_total", 0) >= len(queries) + 5, "metrics count searches (%s)"
          % m.get("helix_kb_search_requests_total"))
    check(m.get("helix_kb_chat_requests_total", 0) >= 2, "metrics count grounded chats")
    check(m.get("helix_kb_reloads_total", 0) >= 2 and m.get("helix_kb_entries") == len(entries),
          "metrics: reloads and entries")
    check(srv.close() == 0, "server exit status 0")
    srv = None

    # ---- no --kb: 400 kb_not_enabled ----
    plain = Server(["-m", model, "-np", "1", "-c", "1024", "-t", "2"])
    st, got = curl(plain, "/v1/kb/search", {"query": "dns"})
    check(st == 400 and err_shape(got, "kb_not_enabled") and "--kb" in got["error"]["message"],
          "search without --kb: 400 kb_not_enabled (%s %s)" % (st, got))
    st, got = curl(plain, chat, {"messages": user, "kb": {"k": 2}})
    check(st == 400 and err_shape(got, "kb_not_enabled") and "--kb" in got["error"]["message"],
          "chat kb without --kb: 400 kb_not_enabled (%s %s)" % (st, got))
    check("helix_kb_" not in plain.request("GET", "/metrics")[2].decode(), "no kb metrics without --kb")
    check(plain.close() == 0, "plain server exit status 0")
    plain = None

    # ---- --kb alone, --kb-max-embed 0: BM25 only, entries counted as unindexed ----
    srv = Server(["--kb", kb, "--kb-max-embed", "0"])
    st, got = curl(srv, "/v1/kb/search", {"query": "postgres vacuum", "k": 5})
    check(st == 200 and got["unindexed"] == len(entries) and got["data"] and
          all(h["cosine"] is None and h["bm25"] > 0 for h in got["data"]),
          "--kb-max-embed 0 without a cache: every entry unindexed, found by BM25 (%s)" % (got,))
    check(srv.close() == 0, "kb-only server exit status 0")
    srv = None

    # ---- an embedder other than the cache's is refused at start ----
    r = subprocess.run([BIN, "one-shot", kb], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and os.path.exists(os.path.join(kb, "embeddings.bin")), "one-shot wrote the cache")
    bert = os.path.join(tmp, "bert.gguf")
    subprocess.run([BIN, "synth", "--preset", "minilm-l6", "--type", "f32", "--layers", "1", "-o", bert, "-t", "2"],
                   check=True, capture_output=True, timeout=300)
    r = subprocess.run([BIN, "serve", "--port", "0", "--kb", kb, "--kb-embed-model", bert], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 1 and "lexical-384" in r.stderr and "embeddings.bin" in r.stderr,
          "--kb-embed-model unlike the cache's embedder: refused, naming both (%s %s)" % (r.returncode, r.stderr[-400:]))
    r = subprocess.run([BIN, "serve", "--port", "0", "-e", bert, "--kb", kb], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 1 and "lexical-384" in r.stderr and "--kb-embed-model" in r.stderr,
          "-e is the KB's embedder by default: refused for a lexical cache (%s)" % r.stderr[-300:])
    srv = Server(["-e", bert, "--kb", kb, "--kb-embed-model", "lexical"])
    st, got = curl(srv, "/v1/kb/search", {"query": "dns", "k": 2})
    check(st == 200 and got["embedder"] == "lexical-384" and got["data"], "--kb-embed-model lexical with -e")
    check(srv.close() == 0, "-e + lexical KB server exit status 0")
    srv = None
    r = subprocess.run([BIN, "serve", "--port", "0", "--kb", os.path.join(tmp, "nope")], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 1 and "--kb" in r.stderr and "data.log" in r.stderr, "--kb without data.log: refused")
    r = subprocess.run([BIN, "serve", "--port", "0", "--kb-embed-model", bert], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode != 0 and "--kb" in r.stderr, "--kb-embed-model without --kb: refused")
    # with the cache in place, the lexical server reads it (nothing embedded now)
    srv = Server(["--kb", kb])
    check("0 embedded now" in srv.log_text(), "the cache's vectors are used (%s)" % srv.log_text()[-300:])
    st, got = curl(srv, "/v1/kb/search", {"query": "dns tls latency", "k": 10})
    ref = cli_search(kb, "dns tls latency", 10)
    check(st == 200 and [h["id"] for h in got["data"]] == [h["id"] for h in ref["hits"]], "cached: the CLI's ranking")
    check(srv.close() == 0, "cached server exit status 0")
    srv = None
finally:
    for s in (srv, plain):
        if s:
            s.close()
    shutil.rmtree(tmp, ignore_errors=True)
check.finish()
