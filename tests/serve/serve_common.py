# SPDX-License-Identifier: MIT
"""Start `nvfp4 serve` on 127.0.0.1 at a free port and talk HTTP to it."""
import atexit
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time

FAILS = []


def check(cond, what):
    if cond:
        PASSED[0] += 1
        print("ok:", what)
    else:
        print("FAIL:", what)
        FAILS.append(what)
    return cond


def finish():
    if FAILS:
        print("%d passed, %d failed" % (PASSED[0], len(FAILS)))
        sys.exit(1)
    print("%d passed, 0 failed" % PASSED[0])


PASSED = [0]


class Server:
    def __init__(self, nvfp4, model, log, *args, env=None, wait_ready=True):
        self.log_path = log
        self.logf = open(log, "w")
        e = dict(os.environ)
        e.setdefault("OMP_NUM_THREADS", "1")
        if env:
            e.update(env)
        self.proc = subprocess.Popen(
            [nvfp4, "serve", model, "--port", "0", "--threads", "1"] + list(args),
            stdout=self.logf, stderr=subprocess.STDOUT, env=e)
        # a test that dies half way leaves no server behind
        atexit.register(self.kill)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + open(log).read())
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log).read())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        if not self.port:
            self.kill()
            raise RuntimeError("server did not listen: " + open(log).read())
        if not wait_ready:
            return
        self.wait_ready(deadline)

    def wait_ready(self, deadline):
        while time.time() < deadline:
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError("server never became ready: " + open(self.log_path).read())

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = self.conn(timeout)
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, r

    def json(self, method, path, body=None, headers=None):
        st, data, _ = self.request(method, path, body, headers)
        try:
            return st, json.loads(data)
        except ValueError:
            return st, data

    def metric(self, name, headers=None):
        st, data, _ = self.request("GET", "/metrics", headers=headers)
        m = re.search(r"^%s (\S+)$" % re.escape(name), data.decode(), re.M)
        return float(m.group(1)) if m else None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        self.logf.close()
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def sse_events(resp):
    """The data: payloads of a server-sent event stream, in order."""
    out = []
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("data: "):
            out.append(line[6:])
    return out


def generate_ref(nvfp4, model, prompt, n):
    """`nvfp4 generate`'s greedy continuation of PROMPT (text, tokens)."""
    p = subprocess.run([nvfp4, "generate", model, "--prompt", prompt, "-n", str(n),
                        "--threads", "1", "--stats"], capture_output=True, timeout=120)
    out = p.stdout
    assert p.returncode == 0, p.stderr
    assert out.startswith(prompt.encode()) and out.endswith(b"\n")
    m = re.search(rb"decode (\d+) tokens", p.stderr)
    return out[len(prompt.encode()):-1], int(m.group(1))
