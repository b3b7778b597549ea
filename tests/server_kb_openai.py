"""helix-bg serve --kb through the official openai Python client:
chat.completions.create(..., extra_body={"kb": {...}}) streamed and not:
the answer carries "citations" (a list, every entry among those the prompt
held, which are the search's best for the question, in order), the citations
are exactly the bracketed numbers of the answer text mapped to those entries,
and a stream ends with a chunk carrying them before [DONE]. A server without
--kb answers the same request with a 400 the client raises as
BadRequestError. The KB is examples/kb copied (any KB works: the checks
compare against the server's own search)."""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import Checks, Server, log, synth_model  # noqa: E402

try:
    import openai
    from openai import OpenAI
except ImportError:
    print("SKIP: the openai package is not installed (pip install openai; scripts/deps.sh tries)")
    sys.exit(77)

check = Checks()


def cited_refs(text, n):
    """kb_ask_citations' rule: [n] or [n, m, ...] lists; numbers 1..n count."""
    refs = set()
    for m in re.finditer(r"\[ *(\d{1,9}(?: *, *\d{1,9})*) *\]", text):
        for x in m.group(1).split(","):
            v = int(x)
            if 1 <= v <= n:
                refs.add(v)
    return sorted(refs)


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


tmp = tempfile.mkdtemp(prefix="server-kb-openai-")
kb = os.path.join(tmp, "kb")
os.mkdir(kb)
shutil.copy("examples/kb/data.log", kb)
srv = plain = None
try:
    model = synth_model()
    srv = Server(["-m", model, "--kb", kb, "-np", "2", "-c", "4096", "-t", "2", "--alias", "smol"])
    client = OpenAI(base_url=srv.url("/v1"), api_key="none", max_retries=0, timeout=120)
    questions = ["Why was the connection pool exhausted?", "How do we rotate TLS certificates?",
                 "What fills the node disk?"]
    for i, q in enumerate(questions):
        k = 3 + i
        msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": q}]
        _, hits = srv.json("POST", "/v1/kb/search", {"query": q, "k": k})
        search_ids = [h["id"] for h in hits["data"]]
        r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=24, temperature=0.8, seed=i,
                                           extra_body={"kb": {"k": k}})
        text = r.choices[0].message.content
        cits, info = extra(r, "citations"), extra(r, "kb")
        if not check(isinstance(cits, list) and isinstance(info, dict), "%r: citations and kb in the answer" % q):
            continue
        ids = info["ids"]
        check(ids and ids == search_ids[:len(ids)] and info["retrieved"] == len(search_ids) and
              info["in_prompt"] == len(ids), "%r: the prompt holds the search's best (%s / %s)" % (q, ids, search_ids))
        check(all(c["id"] in search_ids and ids[c["ref"] - 1] == c["id"] and c["title"] == hits["data"][c["ref"] - 1]["title"]
                  for c in cits), "%r: every citation is a retrieved entry (%s)" % (q, cits))
        check([c["ref"] for c in cits] == cited_refs(text, len(ids)), "%r: citations = the answer's [n] (%r, %s)"
              % (q, text, cits))
        log("%r -> %r citations %s" % (q, text[:60], [c["ref"] for c in cits]))

        # streamed: the same fields on a last chunk before [DONE]
        stream = client.chat.completions.create(model="smol", messages=msgs, max_tokens=24, temperature=0.8,
                                                seed=i, stream=True, extra_body={"kb": {"k": k}})
        chunks = list(stream)
        parts = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        last = chunks[-1] if chunks else None
        scit = extra(last, "citations") if last else None
        check(last is not None and not last.choices and isinstance(scit, list) and
              extra(last, "kb")["ids"] == ids, "%r: the stream's last chunk carries citations and kb" % q)
        check(sum(1 for c in chunks if extra(c, "citations") is not None) == 1, "%r: exactly one citations chunk" % q)
        check(parts == text, "%r: the stream's text is the same answer (seeded)" % q)
        if isinstance(scit, list):
            check([c["ref"] for c in scit] == cited_refs(parts, len(ids)), "%r: stream citations = its [n]" % q)
    # topic: only the topic's entries in the prompt
    _, hits = srv.json("POST", "/v1/kb/search", {"query": "slow queries", "k": 4, "topic": "databases"})
    r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "slow queries"}],
                                       max_tokens=4, extra_body={"kb": {"k": 4, "topic": "databases"}})
    check(extra(r, "kb")["ids"] == [h["id"] for h in hits["data"]][:len(extra(r, "kb")["ids"])] and
          all(h["topic"] == "databases" for h in hits["data"]), "kb.topic reaches the retrieval")
    # an ordinary request has no citations
    r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    check(extra(r, "citations") is None and extra(r, "kb") is None, "no kb: no citations field")
    try:
        client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                       extra_body={"kb": {"k": 0}})
        check(False, "kb.k 0 raises")
    except openai.BadRequestError as e:
        check(e.status_code == 400, "kb.k 0: BadRequestError 400")
    check(srv.close() == 0, "server exit status 0")
    srv = None

    plain = Server(["-m", model, "-np", "1", "-c", "1024", "-t", "2", "--alias", "smol"])
    client = OpenAI(base_url=plain.url("/v1"), api_key="none", max_retries=0, timeout=60)
    try:
        client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                       extra_body={"kb": {"k": 8}})
        check(False, "kb on a server without --kb raises")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "--kb" in str(e), "kb without --kb: BadRequestError 400 naming --kb (%s)" % e)
    check(plain.close() == 0, "plain server exit status 0")
    plain = None

    # ---- a real model (skipped where absent): citations name retrieved entries ----
    real = os.path.join(os.environ.get("HX_REAL_DIR", os.path.expanduser("~/.cache/helix/real")),
                        "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(real):
        log("note: %s not found (bench/real_models_fetch.sh): the real-model check is skipped" % real)
    else:
        rkb = os.path.join(tmp, "ask_kb")
        import subprocess
        subprocess.run([sys.executable, "bench/ask_kb/make_kb.py", rkb], check=True, timeout=60)
        srv = Server(["-m", real, "--kb", rkb, "-np", "1", "-c", "2048", "-t", "2", "--alias", "smol"])
        client = OpenAI(base_url=srv.url("/v1"), api_key="none", max_retries=0, timeout=600)
        n_cited = 0
        for q in ["Which UDP port does the office VPN use?", "Who approves schema migrations?"]:
            r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": q}], max_tokens=48,
                                               temperature=0, extra_body={"kb": {"k": 4}})
            text, cits, info = r.choices[0].message.content, extra(r, "citations"), extra(r, "kb")
            n_cited += len(cits)
            check(all(ids_ok for ids_ok in [c["id"] in info["ids"] for c in cits]) and
                  [c["ref"] for c in cits] == cited_refs(text, len(info["ids"])),
                  "real model %r: citations are the answer's [n] among the retrieved (%r %s)" % (q, text, cits))
            log("real model: %r -> %r citations %s bad %d" % (q, text[:80], [c["title"] for c in cits],
                                                               info["bad_citations"]))
        check(srv.close() == 0, "real-model server exit status 0")
        srv = None
finally:
    for s in (srv, plain):
        if s:
            s.close()
    shutil.rmtree(tmp, ignore_errors=True)
check.finish()
