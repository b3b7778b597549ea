"""helix-bg serve driven by the official openai Python client: chat, streaming,
completions, embeddings (the chat model's hidden states, and a BERT model
with -e when ../shared has one), json_object output that parses, stop
strings, logprobs, logit_bias, seeds, and the errors clients see (bad key
401, bad JSON 400, too long 400, unknown model 404). Then the tiny reference
models from ../shared, when present."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import SHARED, Checks, Server, log, synth_model  # noqa: E402

try:
    import openai
    from openai import OpenAI
except ImportError:
    print("SKIP: the openai package is not installed (pip install openai; scripts/deps.sh tries)")
    sys.exit(77)

check = Checks()
KEY = "sk-openai-test"
SCHEMA = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": {
    "type": "object", "additionalProperties": False, "required": ["name", "age", "ok", "tags"],
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"},
                   "tags": {"type": ["array", "null"]}, "unused": {"type": "string"}}}}}


def follows(text):
    """The text is one object with SCHEMA's required keys, in order, of their types."""
    try:
        o = json.loads(text)
    except ValueError:
        return False
    return (isinstance(o, dict) and list(o) == ["name", "age", "ok", "tags"] and isinstance(o["name"], str)
            and isinstance(o["age"], int) and not isinstance(o["age"], bool) and isinstance(o["ok"], bool)
            and (o["tags"] is None or isinstance(o["tags"], list)))

bert = os.path.join(SHARED, "models/ref-tiny/tiny-bert-shared.gguf")
args = ["-m", synth_model(), "-np", "4", "-c", "4096", "-t", "2", "--api-key", KEY, "--alias", "smol"]
if os.path.exists(bert):
    args += ["-e", bert]
else:
    log("note: %s not found: BERT embeddings not tested" % bert)
srv = Server(args)
client = OpenAI(base_url=srv.url("/v1"), api_key=KEY, max_retries=0, timeout=60)
msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]
try:
    # ---- chat ----
    r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=20, temperature=0)
    c0 = r.choices[0]
    check(r.object == "chat.completion" and c0.message.role == "assistant" and isinstance(c0.message.content, str),
          "chat completion")
    check(c0.finish_reason in ("stop", "length") and r.usage.completion_tokens <= 20 and r.usage.prompt_tokens > 5,
          "finish reason and usage (%s %s)" % (c0.finish_reason, r.usage))
    models = [m.id for m in client.models.list()]
    check("smol" in models, "models.list has the alias (%s)" % models)

    # ---- streaming gives the same text ----
    parts, finish, n = [], None, 0
    for ch in client.chat.completions.create(model="smol", messages=msgs, max_tokens=20, temperature=0, stream=True):
        n += 1
        if ch.choices and ch.choices[0].delta.content:
            parts.append(ch.choices[0].delta.content)
        if ch.choices and ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    check("".join(parts) == c0.message.content and finish == c0.finish_reason,
          "stream == non-stream (%r / %r)" % ("".join(parts), c0.message.content))
    check(n >= 2, "several chunks (%d)" % n)

    # prefix reuse: the same system prompt again
    r2 = client.chat.completions.create(model="smol", messages=msgs[:1] + [{"role": "user", "content": "Other."}],
                                        max_tokens=4, temperature=0)
    cached = (r2.usage.prompt_tokens_details.cached_tokens if r2.usage.prompt_tokens_details else 0) or 0
    check(cached > 0, "the shared system prompt is reused (cached_tokens %s)" % cached)

    # a long system prompt shared by requests running at the same time: the second copies the first's prefix
    sysmsg = {"role": "system", "content": "You answer in rhymes about the sea, " * 8}
    stream = client.chat.completions.create(model="smol", messages=[sysmsg, {"role": "user", "content": "One"}],
                                            max_tokens=400, temperature=0, stream=True)
    next(iter(stream))   # the first request holds its slot, decoding
    r3 = client.chat.completions.create(model="smol", messages=[sysmsg, {"role": "user", "content": "Two"}],
                                        max_tokens=2, temperature=0)
    stream.close()
    cached = (r3.usage.prompt_tokens_details.cached_tokens if r3.usage.prompt_tokens_details else 0) or 0
    check(cached >= 64, "a busy slot's prefix is copied (cached_tokens %s of %s)" % (cached, r3.usage.prompt_tokens))

    # ---- completions ----
    r = client.completions.create(model="smol", prompt="Once upon a time", max_tokens=12, temperature=0)
    check(r.object == "text_completion" and isinstance(r.choices[0].text, str) and r.usage.completion_tokens > 0,
          "completion")
    text = "".join(c.choices[0].text for c in client.completions.create(
        model="smol", prompt="Once upon a time", max_tokens=12, temperature=0, stream=True) if c.choices)
    check(text == r.choices[0].text, "streamed completion == non-stream")

    # ---- seeds (the random-weight model is very peaked: a high temperature spreads it) ----
    flat = dict(temperature=100.0, extra_body={"top_k": 0, "min_p": 0, "top_p": 1})
    a = client.completions.create(model="smol", prompt="x", max_tokens=12, seed=7, **flat).choices[0].text
    b = client.completions.create(model="smol", prompt="x", max_tokens=12, seed=7, **flat).choices[0].text
    c = [client.completions.create(model="smol", prompt="x", max_tokens=12, seed=s, **flat).choices[0].text
         for s in (8, 9, 10)]
    check(a == b and any(x != a for x in c), "same seed, same text; other seeds differ (%r %r %r)" % (a, b, c))

    # ---- logit_bias -100 bans the greedy token; logprobs are log-probabilities ----
    g = client.completions.create(model="smol", prompt="hello", max_tokens=3, temperature=0, logprobs=1)
    first = g.choices[0].logprobs.tokens[0]
    tok = srv.json("POST", "/tokenize", {"content": first}, {"Authorization": "Bearer " + KEY})[1]["tokens"]
    r = client.completions.create(model="smol", prompt="hello", max_tokens=3, temperature=0, logprobs=1,
                                  logit_bias={str(tok[0]): -100})
    check(len(tok) == 1 and r.choices[0].logprobs.tokens[0] != first,
          "logit_bias -100 bans the greedy token (%r, then %r)" % (first, r.choices[0].logprobs.tokens[0]))
    r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=6, temperature=0, logprobs=True,
                                       top_logprobs=3)
    lp = r.choices[0].logprobs.content
    check(len(lp) == r.usage.completion_tokens and all(len(e.top_logprobs) == 3 for e in lp), "logprobs per token")
    check(all(e.logprob <= 0 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob for e in lp),
          "logprobs <= 0, top sorted")
    check(all(abs(e.logprob - e.top_logprobs[0].logprob) < 1e-4 for e in lp), "greedy token = top-1")

    # ---- json_object: the output always parses, even when max_tokens is small ----
    bad = []
    for i, mt in enumerate([3, 6, 10, 25, 60, 60, 60]):
        r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "JSON please"}],
                                           max_tokens=mt, temperature=1.0, seed=i,
                                           response_format={"type": "json_object"})
        out = r.choices[0].message.content
        try:
            if not isinstance(json.loads(out), dict):
                bad.append(out)
        except ValueError:
            bad.append(out)
    check(not bad, "json_object outputs parse as objects (bad: %r)" % bad[:3])
    # json_schema: the top-level keys in order, each of its type (nested schemas are not enforced)
    bad = []
    for i, mt in enumerate([45, 80, 80, 120]):
        r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "JSON"}], max_tokens=mt,
                                           temperature=1.0, seed=10 + i, response_format=SCHEMA)
        if not follows(r.choices[0].message.content):
            bad.append(r.choices[0].message.content)
    check(not bad, "json_schema outputs have the keys and types (bad: %r)" % bad[:2])
    try:
        client.chat.completions.create(model="smol", messages=msgs, max_tokens=5, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array"}}})
        check(False, "a top-level array schema accepted")
    except openai.BadRequestError as x:
        check(x.status_code == 400, "json_schema: a top-level array is refused (400)")

    # ---- stop strings ----
    base = client.completions.create(model="smol", prompt="abc", max_tokens=30, temperature=0).choices[0].text
    if len(base) > 8:
        stop = base[5:8]
        r = client.completions.create(model="smol", prompt="abc", max_tokens=30, temperature=0, stop=[stop, "\u00e9\u00e9"])
        check(r.choices[0].text == base[:base.find(stop)] and r.choices[0].finish_reason == "stop",
              "stop string (%r in %r -> %r)" % (stop, base, r.choices[0].text))
    else:
        log("note: greedy text too short for the stop check")

    # ---- embeddings ----
    r = client.embeddings.create(model="smol", input=["hello world", "goodbye"])
    v = [d.embedding for d in r.data]
    check(len(v) == 2 and len(v[0]) == 576 and abs(sum(x * x for x in v[0]) - 1) < 1e-3,
          "decoder embeddings: unit vectors of n_embd (%d)" % len(v[0]))
    r1 = client.embeddings.create(model="smol", input="hello world", encoding_format="float")
    check(max(abs(x - y) for x, y in zip(r1.data[0].embedding, v[0])) < 1e-5, "float and base64 encodings agree")
    if os.path.exists(bert):
        bid = os.path.basename(bert)[:-5]
        r = client.embeddings.create(model=bid, input=["a cat", "a cat", "stock prices"])
        e = [d.embedding for d in r.data]
        dot = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
        check(abs(dot(e[0], e[1]) - 1) < 1e-4 and dot(e[0], e[2]) < 0.999 and r.usage.prompt_tokens > 0,
              "BERT embeddings (%s)" % bid)

    # ---- errors as the client sees them ----
    try:
        OpenAI(base_url=srv.url("/v1"), api_key="wrong", max_retries=0).models.list()
        check(False, "bad key accepted")
    except openai.AuthenticationError as x:
        check(x.status_code == 401, "bad key: 401")
    try:
        client.chat.completions.create(model="nope", messages=msgs)
        check(False, "unknown model accepted")
    except openai.NotFoundError as x:
        check(x.status_code == 404 and x.code == "model_not_found", "unknown model: 404 model_not_found")
    try:
        client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "go " * 3000}])
        check(False, "too long prompt accepted")
    except openai.BadRequestError as x:
        check(x.status_code == 400 and x.code == "context_length_exceeded", "too long: 400 context_length_exceeded")
    # bad JSON cannot come from the client: the same endpoint, raw
    st, body = srv.json("POST", "/v1/chat/completions", b'{"messages": [', {"Authorization": "Bearer " + KEY})
    check(st == 400 and body["error"]["code"] == "invalid_json", "bad JSON: 400 invalid_json")
finally:
    rc = srv.stop()
    srv.close()
check(rc == 0, "exit 0 on SIGTERM")

# ---- the tiny reference models (real tokenizers and chat templates) ----
for name in ["tiny-qwen3-shared.gguf", "tiny-llama3-shared.gguf", "tiny-gemma3-shared.gguf"]:
    path = os.path.join(SHARED, "models/ref-tiny", name)
    if not os.path.exists(path):
        log("note: %s not found: skipped" % path)
        continue
    s = Server(["-m", path, "-np", "2", "-c", "1024", "-t", "2"])
    try:
        cl = OpenAI(base_url=s.url("/v1"), api_key="none", max_retries=0, timeout=60)
        mid = cl.models.list().data[0].id
        r = cl.chat.completions.create(model=mid, messages=[{"role": "user", "content": "Hi there"}], max_tokens=8,
                                       temperature=0)
        st = "".join(c.choices[0].delta.content or "" for c in cl.chat.completions.create(
            model=mid, messages=[{"role": "user", "content": "Hi there"}], max_tokens=8, temperature=0, stream=True)
            if c.choices)
        check(r.usage.completion_tokens > 0 and st == r.choices[0].message.content, "%s: chat and stream" % name)
        r = cl.chat.completions.create(model=mid, messages=[{"role": "user", "content": "JSON"}], max_tokens=30,
                                       response_format={"type": "json_object"}, seed=3)
        try:
            ok = isinstance(json.loads(r.choices[0].message.content), dict)
        except ValueError:
            ok = False
        check(ok, "%s: json_object parses (%r)" % (name, r.choices[0].message.content))
        r = cl.chat.completions.create(model=mid, messages=[{"role": "user", "content": "JSON"}], max_tokens=120,
                                       response_format=SCHEMA, seed=4)
        check(follows(r.choices[0].message.content), "%s: json_schema keys and types (%r)" %
              (name, r.choices[0].message.content))
        z = s.json("POST", "/tokenize", {"content": "Z"})[1]["tokens"][-1]
        r = cl.completions.create(model=mid, prompt="hello", max_tokens=4, temperature=0, logit_bias={str(z): 100})
        check(r.choices[0].text == "Z" * 4, "%s: logit_bias +100 forces a token (%r)" % (name, r.choices[0].text))
    finally:
        check(s.close() == 0, "%s: server exit 0" % name)
check.finish()
