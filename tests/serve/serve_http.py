# SPDX-License-Identifier: MIT
"""nvfp4 serve over plain HTTP (standard library only): batch invariance of
32 concurrent greedy streams against `nvfp4 generate`, errors, limits,
disconnects, queueing, timeouts and shutdown.  argv: nvfp4 model workdir."""
import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from serve_common import Server, check, finish, generate_ref, sse_events

NVFP4, MODEL, WORK = sys.argv[1:4]
KEY = "sk-test-0123456789"
key_file = os.path.join(WORK, "key")
with open(key_file, "w") as f:
    f.write(KEY + "\n")
AUTH = {"Authorization": "Bearer " + KEY}

# max_tokens of the requests that must still be running when the test acts
# (a second request, a disconnect, --timeout 2, SIGTERM): the served model
# (serve.test) and the servers here have a context of 65536 (--ctx), and
# with its small vocabulary one stream decodes 10-15 thousand tokens a second
# on the project machine, so 60000 take several seconds
LONG = 60000
CTX = "65536"

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly "
         "judge boxing matches near the old river bank").split()


def prompt_of(i):
    n = 1 + (i * 7) % 23          # 1..23 words: prompts of mixed lengths
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n))


# ---- 1. batch invariance: 32 concurrent greedy streams ---------------------
N = 32
cases = [(prompt_of(i), 3 + (i * 5) % 22) for i in range(N)]
refs = [generate_ref(NVFP4, MODEL, p, n) for p, n in cases]

srv = Server(NVFP4, MODEL, os.path.join(WORK, "server.log"), "--ctx", CTX, "--api-key-file", key_file,
             "--max-body", "65536", "--max-batch-tokens", "64")
results = [None] * N


def stream_one(i):
    p, n = cases[i]
    body = {"model": "model", "prompt": p, "max_tokens": n, "temperature": 0,
            "stream": True, "logprobs": 0, "stream_options": {"include_usage": True}}
    c = srv.conn(120)
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers=dict(AUTH, **{"Content-Type": "application/json"}))
    r = c.getresponse()
    results[i] = (r.status, r.getheader("Content-Type"), sse_events(r))
    c.close()


threads = [threading.Thread(target=stream_one, args=(i,)) for i in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join(180)
all_ok = True
for i, (res, (ref_text, ref_n)) in enumerate(zip(results, refs)):
    if res is None:
        all_ok = check(False, "stream %d finished" % i)
        continue
    st, ctype, events = res
    ok = st == 200 and ctype.startswith("text/event-stream") and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    toks = [t for c in chunks if c["choices"] and c["choices"][0]["logprobs"]
            for t in c["choices"][0]["logprobs"]["tokens"]]
    fins = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    usage = chunks[-1].get("usage") or {}
    ids = {c["id"] for c in chunks}
    # the server sends invalid UTF-8 (a token that is part of a character) as
    # U+FFFD per maximal subpart, as Python's "replace" does
    ok = ok and text == ref_text.decode("utf-8", "replace") and len(ids) == 1
    # one chunk per token, none lost or repeated: the count of token chunks
    # is the usage count (minus the end-of-sequence token, not shown)
    ok = ok and fins[-1] in ("stop", "length") and all(f is None for f in fins[:-1])
    if fins[-1] == "length":
        ok = ok and len(toks) == ref_n == usage.get("completion_tokens") == cases[i][1]
    else:
        ok = ok and len(toks) == ref_n and usage.get("completion_tokens") == ref_n + 1
    if not ok:
        print("stream %d: status %s, got %r (%d tokens), want %r (%d tokens), usage %r" %
              (i, st, text, len(toks), ref_text, ref_n, usage))
    all_ok = all_ok and ok
check(all_ok, "32 concurrent greedy streams equal `nvfp4 generate` token for token")

# the same prompts, not streamed, one after another
st, r = srv.json("POST", "/v1/completions",
                 {"prompt": cases[5][0], "max_tokens": cases[5][1], "temperature": 0}, AUTH)
check(st == 200 and r["choices"][0]["text"] == refs[5][0].decode("utf-8", "replace") and
      r["object"] == "text_completion" and r["usage"]["prompt_tokens"] > 0,
      "non-streamed completion equals generate")

# token ids as the prompt, /tokenize and /detokenize
st, tk = srv.json("POST", "/tokenize", {"prompt": cases[7][0]}, AUTH)
check(st == 200 and tk["count"] == len(tk["tokens"]) > 0, "/tokenize")
st, r = srv.json("POST", "/v1/completions",
                 {"prompt": tk["tokens"], "max_tokens": cases[7][1], "temperature": 0}, AUTH)
check(st == 200 and r["choices"][0]["text"] == refs[7][0].decode("utf-8", "replace"), "prompt as token ids")
st, dt = srv.json("POST", "/detokenize", {"tokens": tk["tokens"]}, AUTH)
check(st == 200 and dt["prompt"] == cases[7][0], "/detokenize round trip")

# stop strings across token boundaries: cut the reference at a point inside it
ref = refs[20][0].decode("utf-8", "replace")
stop = ref[len(ref) // 2:len(ref) // 2 + 3]
st, r = srv.json("POST", "/v1/completions",
                 {"prompt": cases[20][0], "max_tokens": cases[20][1], "temperature": 0,
                  "stop": [stop]}, AUTH)
check(st == 200 and r["choices"][0]["text"] == ref[:ref.index(stop)] and
      r["choices"][0]["finish_reason"] == "stop", "stop string %r cuts the output" % stop)
events = []
c = srv.conn()
c.request("POST", "/v1/completions", json.dumps(
    {"prompt": cases[20][0], "max_tokens": cases[20][1], "temperature": 0, "stop": stop,
     "stream": True}), AUTH)
events = sse_events(c.getresponse())
text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
check(text == ref[:ref.index(stop)], "streamed stop string holds back and cuts")

# sampling: same seed same text, temperature/top-k/min-p/penalties accepted
body = {"prompt": "the river", "max_tokens": 12, "temperature": 0.9, "top_p": 0.9,
        "top_k": 40, "min_p": 0.01, "seed": 7, "presence_penalty": 0.5,
        "frequency_penalty": 0.3}
a = srv.json("POST", "/v1/completions", body, AUTH)
b = srv.json("POST", "/v1/completions", body, AUTH)
check(a[0] == 200 and a[1]["choices"] == b[1]["choices"], "seeded sampling repeats")
st, r = srv.json("POST", "/v1/completions",
                 {"prompt": "the river", "max_tokens": 3, "logprobs": 3}, AUTH)
lp = r["choices"][0]["logprobs"] if st == 200 else None
check(lp and len(lp["tokens"]) == 3 and all(len(t) <= 3 for t in lp["top_logprobs"]) and
      all(x <= 0 for x in lp["token_logprobs"]), "logprobs")

# chat: the model's template (rendered by `nvfp4 template`), then greedy
msgs = [{"role": "user", "content": "Name a colour."}]
mfile = os.path.join(WORK, "messages.json")
with open(mfile, "w") as f:
    json.dump(msgs, f)
rendered = subprocess.run([NVFP4, "template", MODEL, "--messages", mfile],
                          capture_output=True, timeout=60).stdout.decode()
check(rendered.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>") and
      rendered.endswith("<|im_start|>assistant\n"), "nvfp4 template renders the test template")
chat_ref = generate_ref(NVFP4, MODEL, rendered, 12)[0].decode("utf-8", "replace")
st, r = srv.json("POST", "/v1/chat/completions",
                 {"messages": msgs, "max_tokens": 12, "temperature": 0}, AUTH)
check(st == 200 and r["object"] == "chat.completion" and
      r["choices"][0]["message"]["role"] == "assistant" and
      r["choices"][0]["message"]["content"] == chat_ref,
      "chat completion through the model's template equals generate")
st, tk = srv.json("POST", "/tokenize", {"messages": msgs}, AUTH)
check(st == 200 and r["usage"]["prompt_tokens"] == tk["count"], "/tokenize of messages")

# prefix caching: a prompt whose first blocks another running sequence has
# cached forks it, and its greedy output still equals generate's
long_prompt = " ".join(WORDS * 2)
long_ref = generate_ref(NVFP4, MODEL, long_prompt + " again", 10)[0]
c = srv.conn()
c.request("POST", "/v1/completions", json.dumps(
    {"prompt": long_prompt, "max_tokens": LONG, "temperature": 0, "stream": True}), AUTH)
first = c.getresponse()
first.readline()
before = srv.metric("nvfp4_prefix_cached_tokens_total", AUTH)
st, r = srv.json("POST", "/v1/completions", {"prompt": long_prompt + " again", "max_tokens": 10,
                                             "temperature": 0}, AUTH)
after = srv.metric("nvfp4_prefix_cached_tokens_total", AUTH)
c.close()
check(st == 200 and r["choices"][0]["text"] == long_ref.decode("utf-8", "replace") and
      after - before >= 16, "shared prefix (%s tokens reused): output equals generate" %
      (after - before))

# a finished request's whole KV blocks stay in the prefix cache: a later
# prompt that begins the same way forks them, and still equals generate
p2 = " ".join(reversed(WORDS * 2))
ref2 = generate_ref(NVFP4, MODEL, p2 + " once more", 6)[0]
st, r = srv.json("POST", "/v1/completions", {"prompt": p2, "max_tokens": 4, "temperature": 0},
                 AUTH)
kept = srv.metric("nvfp4_prefix_cache_sequences", AUTH)
before = srv.metric("nvfp4_prefix_cached_tokens_total", AUTH)
st2, r2 = srv.json("POST", "/v1/completions", {"prompt": p2 + " once more", "max_tokens": 6,
                                              "temperature": 0}, AUTH)
after = srv.metric("nvfp4_prefix_cached_tokens_total", AUTH)
check(st == 200 and kept >= 1 and st2 == 200 and
      r2["choices"][0]["text"] == ref2.decode("utf-8", "replace") and after - before >= 32,
      "a finished request's prefix reused (%s tokens): output equals generate" %
      (after - before))

# ---- 2. errors: each gets its status, the server keeps serving --------------
def status(method, path, body=None, headers=AUTH):
    return srv.request(method, path, body, headers)[0]


check(status("GET", "/v1/models", headers={}) == 401, "no key: 401")
check(status("GET", "/v1/models", headers={"Authorization": "Bearer nope"}) == 401,
      "wrong key: 401")
check(status("GET", "/health", headers={}) == 200, "/health needs no key")
check(status("GET", "/nope") == 404, "unknown route: 404")
check(status("GET", "/v1/completions") == 405, "wrong method: 405")
check(status("POST", "/v1/completions", '{"prompt": "x", "max_tok') == 400,
      "malformed JSON: 400")
check(status("POST", "/v1/completions", "[1, 2]") == 400, "not an object: 400")
check(status("POST", "/v1/completions", json.dumps({"prompt": "x" * 70000})) == 413,
      "oversized body (Content-Length): 413")


def chunked_body():
    yield b'{"prompt": "'
    for _ in range(40):
        yield b"y" * 4096
    yield b'"}'


c = srv.conn()
c.request("POST", "/v1/completions", body=chunked_body(), headers=AUTH,
          encode_chunked=True)
r = c.getresponse()
check(r.status == 413, "oversized chunked body: 413")
c.close()
for body, field in [({"prompt": "x", "temperature": 5}, "temperature"),
                    ({"prompt": "x", "top_p": 0}, "top_p"),
                    ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
                    ({"prompt": "x", "max_tokens": 100000}, "max_tokens"),
                    ({"prompt": "x", "logprobs": 50}, "logprobs"),
                    ({"prompt": "x", "stop": ["a"] * 17}, "stop"),
                    ({"prompt": "x", "n": 2}, "n"),
                    ({"prompt": "x", "tools": [{"type": "function"}]}, "tools"),
                    ({"prompt": [99999999]}, "prompt"),
                    ({"prompt": ""}, "prompt"),
                    ({"prompt": "x", "top_k": "a"}, "top_k"),
                    ({"prompt": "x", "seed": 1.5}, "seed"),
                    ({"prompt": "x", "ignore_eos": "yes"}, "ignore_eos"),
                    ({"max_tokens": 3}, "prompt")]:
    st, r = srv.json("POST", "/v1/completions", body, AUTH)
    check(st == 400 and r["error"]["param"] == field and r["error"]["message"],
          "bad %s: 400 naming it" % field)
st, r = srv.json("POST", "/v1/completions", {"prompt": "x", "model": "gpt-9"}, AUTH)
check(st == 404 and r["error"]["code"] == "model_not_found", "unknown model: 404")
st, r = srv.json("POST", "/v1/chat/completions", {"messages": [{"role": "tool"}]}, AUTH)
check(st == 400 and r["error"]["param"] == "messages", "bad chat message: 400")

# raw garbage on the socket, then a half-sent request left hanging
s = socket.create_connection(("127.0.0.1", srv.port))
s.sendall(b"\x00\xffGARBAGE\r\n\r\n")
s.settimeout(10)
try:
    s.recv(100)
except OSError:
    pass
s.close()
s = socket.create_connection(("127.0.0.1", srv.port))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
s.close()

# ---- 3. a client that disconnects mid-stream frees its sequence at once -----
for stream in (True, False):
    c = srv.conn()
    c.request("POST", "/v1/completions", json.dumps(
        {"prompt": "the lazy dog", "max_tokens": LONG, "temperature": 0, "stream": stream}),
        AUTH)
    if stream:
        r = c.getresponse()
        r.readline()          # the first event has come
    else:
        time.sleep(0.3)
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    t0 = time.time()
    while time.time() - t0 < 5 and srv.metric("nvfp4_sequences_running", AUTH) != 0:
        time.sleep(0.05)
    # (what blocks stay are the prefix cache's)
    check(srv.metric("nvfp4_sequences_running", AUTH) == 0 and
          srv.metric("nvfp4_kv_blocks_used", AUTH) <=
          srv.metric("nvfp4_prefix_cache_blocks", AUTH) and time.time() - t0 < 2,
          "disconnect (%s) frees the sequence (%.2f s)" % (
              "stream" if stream else "whole", time.time() - t0))

st, r = srv.json("POST", "/v1/completions",
                 {"prompt": cases[3][0], "max_tokens": cases[3][1], "temperature": 0}, AUTH)
check(st == 200 and r["choices"][0]["text"] == refs[3][0].decode("utf-8", "replace"),
      "still serving, still the same output")
st, data, _ = srv.request("GET", "/metrics", headers=AUTH)
m = data.decode()
check(st == 200 and "nvfp4_time_to_first_token_seconds_bucket" in m and
      "nvfp4_inter_token_latency_seconds_count" in m and
      srv.metric("nvfp4_generation_tokens_total", AUTH) > 300, "/metrics")
# the KV bytes per token from the model's config.json (float32 elements: no FP8 KV scheme)
with open(os.path.join(MODEL, "config.json")) as f:
    cfg = json.load(f)
hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
want = 2 * cfg["num_hidden_layers"] * cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * hd * 4
check(srv.metric("nvfp4_kv_cache_bytes_per_token", AUTH) == want,
      "/metrics: nvfp4_kv_cache_bytes_per_token %r, want %d" % (
          srv.metric("nvfp4_kv_cache_bytes_per_token", AUTH), want))
rc = srv.stop()
check(rc == 0, "SIGTERM: clean exit (%r)" % rc)

# ---- 4. a full batch queues, a full queue is 429, timeouts are 504 ---------
srv = Server(NVFP4, MODEL, os.path.join(WORK, "server2.log"), "--ctx", CTX, "--max-seqs", "1",
             "--max-queue", "1", "--timeout", "2", "--max-batch-tokens", "16", "--grace", "0.5")
out = {}


started = {t: threading.Event() for t in "abc"}


def long_stream(tag):
    c = srv.conn(60)
    c.request("POST", "/v1/completions", json.dumps(
        {"prompt": "a b c", "max_tokens": LONG, "stream": True, "temperature": 0}))
    r = c.getresponse()
    first = r.readline()
    started[tag].set()
    out[tag] = (r.status, sse_events(r))
    if first.startswith(b"data: "):
        out[tag][1].insert(0, first.decode().rstrip("\r\n")[6:])


ta = threading.Thread(target=long_stream, args=("a",))
ta.start()
started["a"].wait(30)
tb = threading.Thread(target=long_stream, args=("b",))
tb.start()
t0 = time.time()
while time.time() - t0 < 5 and srv.metric("nvfp4_sequences_queued") != 1:
    time.sleep(0.01)
st, r = srv.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
check(st == 429 and r["error"]["type"] == "rate_limit_error", "full queue: 429")
ta.join(30)
tb.join(30)
a_err = out.get("a") and json.loads(out["a"][1][-2]).get("error")
check(a_err and a_err["type"] == "timeout_error" and out["a"][1][-1] == "[DONE]",
      "running request past --timeout: error event, [DONE]")
b_err = out.get("b") and json.loads(out["b"][1][-2]).get("error")
check(b_err and b_err["type"] == "timeout_error", "queued request past --timeout: error event")

# ---- 5. SIGTERM with a stream running: it ends cleanly, the server exits ----
srv.stop()
srv = srv2 = Server(NVFP4, MODEL, os.path.join(WORK, "server3.log"), "--ctx", CTX, "--grace", "0.3")
tc = threading.Thread(target=long_stream, args=("c",))
tc.start()
started["c"].wait(30)
t0 = time.time()
rc = srv2.stop()
tc.join(30)
ev = out.get("c", (0, []))[1]
err = len(ev) > 1 and json.loads(ev[-2]).get("error")
check(rc == 0 and time.time() - t0 < 20 and ev and ev[-1] == "[DONE]" and err and
      "shut down" in err["message"],
      "SIGTERM mid-stream: the stream ends with [DONE], exit 0")

# ---- 6. /health is 503 while the model loads, then 200 ---------------------
# The server listens, says so on stderr, then loads the model.  Its stderr
# here is a pipe this test filled beforehand: the 'listening' line blocks
# the main thread before loading, with the HTTP threads up.  So while the
# pipe stays full the model cannot have loaded (no timing involved); then
# the pipe is drained and loading goes on.
rfd, wfd = os.pipe()
os.set_blocking(wfd, False)
try:
    while True:
        os.write(wfd, b"." * 65536)
except BlockingIOError:
    pass
os.set_blocking(wfd, True)      # the server's writes must block, not fail
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
env = dict(os.environ, OMP_NUM_THREADS="1")
proc = subprocess.Popen([NVFP4, "serve", MODEL, "--port", str(port), "--threads", "1",
                         "--api-key", KEY], stdout=wfd, stderr=wfd, env=env)
atexit.register(lambda: proc.poll() is None and proc.kill())
os.close(wfd)
srv.port = port                 # Server's HTTP helpers, on the new server


def health():
    try:
        return srv.json("GET", "/health")
    except OSError:
        return None, None


t0 = time.time()
st, r = health()
while st is None and time.time() - t0 < 60 and proc.poll() is None:
    time.sleep(0.02)
    st, r = health()
check(st == 503 and r == {"status": "loading"}, "/health while loading: 503 loading (%s)" % st)
st, r = srv.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, AUTH)
check(st == 503 and "loading" in r["error"]["message"], "a completion while loading: 503")
check(srv.json("GET", "/v1/models", None, {})[0] == 401, "the key is checked while loading")
log = []
drain = threading.Thread(target=lambda: log.extend(iter(lambda: os.read(rfd, 65536), b"")))
drain.start()
t0 = time.time()
while time.time() - t0 < 60 and health()[0] != 200 and proc.poll() is None:
    time.sleep(0.02)
st, r = health()
check(st == 200 and r == {"status": "ok"}, "/health once loaded: 200 ok")
st, r = srv.json("POST", "/v1/completions",
                 {"prompt": cases[3][0], "max_tokens": cases[3][1], "temperature": 0}, AUTH)
check(st == 200 and r["choices"][0]["text"] == refs[3][0].decode("utf-8", "replace"),
      "then it serves, the same output")
proc.send_signal(signal.SIGTERM)
try:
    rc = proc.wait(30)
except subprocess.TimeoutExpired:
    proc.kill()
    rc = None
drain.join(10)
os.close(rfd)
check(rc == 0 and b"ready" in b"".join(log), "stopped (%r)" % rc)
finish()
