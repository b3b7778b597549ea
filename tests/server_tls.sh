#!/usr/bin/env bash
# server_tls.sh — helix-bg serve over HTTPS (--ssl-cert / --ssl-key, libmicrohttpd's
# TLS): a self-signed certificate made with openssl; /health, a completion and a
# stream over https checked with curl --cacert; curl without the CA refuses the
# certificate; plain HTTP to the same port gets no answer and does not hurt the
# server; bad or missing certificate and key files fail at start naming the file.
# The model is the tiny synthetic one tests/server_util.py makes for every serve test.
set -u
cd "$(dirname "$0")/.."
BIN="${HX_BIN:-build/helix-bg}"
[ -x "$BIN" ] || { echo "SKIP: $BIN not built"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: curl not found"; exit 77; }
command -v openssl >/dev/null || { echo "SKIP: openssl not found (scripts/deps.sh installs it): no certificate to test with"; exit 77; }
tmp="$(mktemp -d /tmp/hx_server_tls.XXXXXX)"
pid=""
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/serve.log" ] && tail -20 "$tmp/serve.log"; exit 1; }

# the serve tests' model: smollm-135m shapes, 2 layers, q8_0, next to the binary (atomic rename)
model="$(cd "$(dirname "$BIN")" && pwd)/server-test-smol.gguf"
if [ ! -f "$model" ]; then
  "$BIN" synth --preset smollm-135m --type q8_0 --layers 2 -o "$model.$$.tmp" >/dev/null 2>&1 || fail "synth"
  mv -f "$model.$$.tmp" "$model"
fi

# a self-signed certificate for 127.0.0.1 / localhost, and a second key that is not its
mkcert() {  # DIR-PREFIX
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$1key.pem" -out "$1cert.pem" >/dev/null 2>&1
}
mkcert "$tmp/" || fail "openssl could not make a self-signed certificate"
mkcert "$tmp/other-" || fail "openssl could not make a second certificate"

# ---- start-up errors name the file (exit 1), a half pair is a usage error (exit 2) ----
expect_err() {  # WANT-RC PATTERN ARGS...
  local want=$1 pat=$2; shift 2
  "$BIN" serve --kb examples/kb --port 0 "$@" > "$tmp/err.txt" 2>&1 </dev/null
  local got=$?
  [ "$got" = "$want" ] && grep -q -- "$pat" "$tmp/err.txt" ||
    { cat "$tmp/err.txt"; fail "serve $* exited $got (want $want, a message matching '$pat')"; }
}
expect_err 2 "go together" --ssl-cert "$tmp/cert.pem"
expect_err 2 "go together" --ssl-key-file "$tmp/key.pem"
expect_err 1 "$tmp/missing.pem: No such file" --ssl-cert "$tmp/missing.pem" --ssl-key "$tmp/key.pem"
expect_err 1 "--ssl-key $tmp/missing.pem" --ssl-cert "$tmp/cert.pem" --ssl-key "$tmp/missing.pem"
expect_err 1 "--ssl-cert $tmp/key.pem: no PEM certificate" --ssl-cert "$tmp/key.pem" --ssl-key "$tmp/key.pem"
expect_err 1 "--ssl-key $tmp/cert.pem: no PEM private key" --ssl-cert "$tmp/cert.pem" --ssl-key "$tmp/cert.pem"
expect_err 1 "--ssl-cert $tmp: not a regular file" --ssl-cert "$tmp" --ssl-key "$tmp/key.pem"
# armour around garbage: the certificate does not parse
{ echo "-----BEGIN CERTIFICATE-----"; echo "bm90IGEgY2VydGlmaWNhdGU="; echo "-----END CERTIFICATE-----"; } > "$tmp/junk.pem"
expect_err 1 "$tmp/junk.pem" --ssl-cert "$tmp/junk.pem" --ssl-key "$tmp/key.pem"
# the key of another certificate (named as such where GnuTLS' headers were there at build time)
expect_err 1 "$tmp/other-key.pem" --ssl-cert "$tmp/cert.pem" --ssl-key "$tmp/other-key.pem"
if [ "$(id -u)" != 0 ]; then   # root reads any file
  cp "$tmp/key.pem" "$tmp/locked.pem"; chmod 000 "$tmp/locked.pem"
  expect_err 1 "$tmp/locked.pem: Permission denied" --ssl-cert "$tmp/cert.pem" --ssl-key "$tmp/locked.pem"
fi

# ---- a server on a free loopback port, llama-server's flag names ----
"$BIN" serve -m "$model" --port 0 -t 2 --ssl-cert-file "$tmp/cert.pem" --ssl-key-file "$tmp/key.pem" \
  > "$tmp/serve.log" 2>&1 </dev/null &
pid=$!
port=""
for _ in $(seq 600); do   # 60 s
  port=$(sed -n 's|.*listening on https://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$tmp/serve.log")
  [ -n "$port" ] && grep -q " ready " "$tmp/serve.log" && break
  kill -0 "$pid" 2>/dev/null || fail "serve exited at start"
  sleep 0.1
done
[ -n "$port" ] && grep -q " ready " "$tmp/serve.log" || fail "serve did not come up on https in 60 s"
base="https://127.0.0.1:$port"
C=(curl -sS --max-time 60 --cacert "$tmp/cert.pem")

out=$("${C[@]}" "$base/health") || fail "GET /health over https"
[ "$out" = '{"status":"ok"}' ] || fail "/health said $out"
"${C[@]}" "https://localhost:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}' > "$tmp/cmpl.json" ||
  fail "POST /v1/completions over https"
python3 - "$tmp/cmpl.json" <<'EOF' || fail "the completion is not what OpenAI's shape says: $(cat "$tmp/cmpl.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["object"] == "text_completion", j
assert j["usage"]["completion_tokens"] == 4 and isinstance(j["choices"][0]["text"], str), j
EOF
# a stream: the connection is suspended and resumed between chunks, through TLS
"${C[@]}" -N "$base/v1/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "stream": true}' > "$tmp/sse.txt" ||
  fail "streamed chat over https"
[ "$(grep -c '^data: {' "$tmp/sse.txt")" -ge 2 ] && [ "$(tail -n 2 "$tmp/sse.txt" | head -n 1)" = "data: [DONE]" ] ||
  { cat "$tmp/sse.txt"; fail "the stream over https is not SSE ending in data: [DONE]"; }

# the certificate is really the one served: without the CA, curl refuses it
curl -sS --max-time 10 "$base/health" > /dev/null 2>&1 && fail "curl trusted the self-signed certificate without --cacert"
# plain HTTP to the TLS port gets no HTTP answer
code=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")
crc=$?
[ "$crc" != 0 ] && [ "$code" = 000 ] || fail "plain http to the https port answered (curl rc $crc, HTTP $code)"
# ... and the server goes on serving https
out=$("${C[@]}" "$base/health") && [ "$out" = '{"status":"ok"}' ] || fail "/health over https after a plain-http client"

kill -TERM "$pid"
wait "$pid"
rc=$?
pid=""
[ "$rc" = 0 ] || fail "serve exited $rc after SIGTERM (a sanitizer report?)"
echo "server_tls: ok (https on port $port: /health, completion, stream; plain http refused; bad cert/key files named)"
