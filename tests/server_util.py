"""Helpers for the helix-bg serve tests (server_*.sh): a small synthetic model,
a server on a free loopback port, plain HTTP requests and /metrics parsing.

Everything is bounded in time: every request has a timeout, a server that
does not come up in 60 s fails the test, and stop() kills what is left."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("HX_BIN", "build/helix-bg")
SHARED = os.environ.get("HX_SHARED", "../shared")


def log(*a):
    print(*a, flush=True)


def synth_model():
    """smollm-135m shapes, 2 layers, q8_0: made once next to the binary (atomic rename)."""
    out = os.path.join(os.path.dirname(os.path.abspath(BIN)), "server-test-smol.gguf")
    if not os.path.exists(out):
        tmp = out + ".%d.tmp" % os.getpid()
        subprocess.run([BIN, "synth", "--preset", "smollm-135m", "--type", "q8_0", "--layers", "2", "-o", tmp],
                       check=True, stdout=subprocess.DEVNULL, timeout=300)
        os.replace(tmp, out)
    return out


class Server:
    def __init__(self, args, wait_ready=True, env=None):
        self.logf = tempfile.NamedTemporaryFile(prefix="serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([BIN, "serve", "--port", "0"] + list(args), stdout=self.logf,
                                     stderr=subprocess.STDOUT, env=env)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            text = self.log_text()
            m = re.search(r"listening on http://[^:]+:(\d+)", text)
            if m:
                self.port = int(m.group(1))
            if self.port and (not wait_ready or " ready " in text or "ready (" in text):
                return
            if self.proc.poll() is not None:
                raise RuntimeError("server exited %s:\n%s" % (self.proc.returncode, text))
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("server did not come up in 60 s:\n" + self.log_text())

    def log_text(self):
        with open(self.logf.name, "r", errors="replace") as f:
            return f.read()

    def url(self, path=""):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers dict, body bytes). body: dict -> JSON, str/bytes as is."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, data

    def json(self, method, path, body=None, headers=None, timeout=60):
        st, h, data = self.request(method, path, body, headers, timeout)
        return st, json.loads(data.decode("utf-8"))

    def metrics(self, headers=None):
        st, _, data = self.request("GET", "/metrics", headers=headers)
        assert st == 200, st
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.split()
                out[k] = float(v)
        return out

    def idle(self, timeout=30):
        """Waits until no slot runs a request (/metrics helix_slots_busy 0); False after timeout s."""
        t = time.time() + timeout
        while time.time() < t:
            if self.metrics().get("helix_slots_busy", 1) == 0:
                return True
            time.sleep(0.05)
        return False

    def alive(self):
        try:
            st, _, _ = self.request("GET", "/health", timeout=10)
            return st == 200
        except OSError:
            return False

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def close(self):
        """Stops the server; returns its exit status (sanitizer reports make it nonzero; the log is shown)."""
        rc = self.stop()
        if rc != 0:
            log("server exit status %s; its log ends:\n%s" % (rc, self.log_text()[-3000:]))
        try:
            os.unlink(self.logf.name)
        except OSError:
            pass
        return rc


class Checks:
    """Counts checks; a failed one prints and is remembered (the test goes on)."""

    def __init__(self):
        self.ok = 0
        self.failed = []

    def __call__(self, cond, what):
        if cond:
            self.ok += 1
        else:
            self.failed.append(what)
            log("FAIL:", what)
        return cond

    def finish(self):
        log("%d passed, %d failed" % (self.ok, len(self.failed)))
        sys.exit(1 if self.failed else 0)
