#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Load generator for OpenAI-compatible servers: `nvfp4 serve` or llama-server
(standard library only).

For each concurrency C, C clients each send REQUESTS streamed completions
back to back (greedy, max_tokens N, "ignore_eos": true so every request
generates N tokens on either server); reported: the aggregate generated
tokens/s (all tokens over the wall time of the level), the median time to
first token and the median inter-token latency (between consecutive
streamed chunks that carry text, pooled over all requests).

Prompts: with --prompt-file, client i's request k gets PROMPT_WORDS words of
the file starting at an offset given by (--tag, i, k), so every prompt is
distinct (no server can reuse a previous request's KV) and a second server
run with the same --tag gets the same prompts; without it, a fixed list of
PROMPT_TOKENS token ids (as before).

  scripts/bench/bench-serve.py --port 8000 [--concurrency 1,4,16,32]
      [--requests 4] [--max-tokens 64] [--prompt-tokens 32]
      [--prompt-file FILE --prompt-words 40 --tag 0] [--json]
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import zlib


def one_request(host, port, body, key):
    c = http.client.HTTPConnection(host, port, timeout=600)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers=h)
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:200]))
    stamps, chunks, usage = [], 0, None
    for line in r:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        t = time.perf_counter()
        ev = json.loads(line[6:])
        if ev.get("error"):
            raise RuntimeError("error event: %s" % ev["error"])
        if ev.get("usage"):
            usage = ev["usage"]
        ch = ev.get("choices") or []
        if not ch:
            continue
        lp = ch[0].get("logprobs")
        n = len(lp["tokens"]) if lp and lp.get("tokens") else (1 if ch[0].get("text") else 0)
        if n:
            stamps.append(t)
            chunks += n
    c.close()
    tokens = usage["completion_tokens"] if usage and "completion_tokens" in usage else chunks
    return t0, stamps, tokens


def make_prompt(args, words, i, k):
    if not words:
        return [(17 * j + 5) % 1000 + 100 for j in range(args.prompt_tokens)]
    off = zlib.crc32(("%s/%d/%d" % (args.tag, i, k)).encode()) % (len(words) - args.prompt_words)
    return " ".join(words[off:off + args.prompt_words])


def run_level(args, conc, words):
    ttft, itl, total = [], [], [0]
    lock = threading.Lock()
    errors = []

    def client(i):
        for k in range(args.requests):
            body = {"prompt": make_prompt(args, words, i, k), "max_tokens": args.max_tokens,
                    "temperature": 0, "stream": True, "ignore_eos": True,
                    "stream_options": {"include_usage": True}}
            if args.model:
                body["model"] = args.model
            try:
                t0, st, n = one_request(args.host, args.port, json.dumps(body), args.api_key)
            except Exception as e:   # noqa: BLE001 - reported below
                errors.append(str(e))
                return
            with lock:
                if st:
                    ttft.append(st[0] - t0)
                    itl.extend(b - a for a, b in zip(st, st[1:]))
                total[0] += n

    ts = [threading.Thread(target=client, args=(i,)) for i in range(conc)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        print("errors at concurrency %d: %s" % (conc, errors[:3]), file=sys.stderr)
    return {"concurrency": conc, "requests": conc * args.requests, "tokens": total[0],
            "errors": len(errors), "seconds": wall, "tokens_per_s": total[0] / wall,
            "ttft_median_ms": 1e3 * statistics.median(ttft) if ttft else None,
            "itl_median_ms": 1e3 * statistics.median(itl) if itl else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--api-key")
    ap.add_argument("--model", default=None, help="model id (default: the server's)")
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--requests", type=int, default=4, help="per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--prompt-file", help="text prompts: words of this file")
    ap.add_argument("--prompt-words", type=int, default=40)
    ap.add_argument("--tag", default="0", help="picks the prompts (same tag, same prompts)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    words = open(args.prompt_file).read().split() if args.prompt_file else None
    if words and len(words) <= args.prompt_words:
        ap.error("--prompt-file has too few words")
    if args.model is None:
        c = http.client.HTTPConnection(args.host, args.port, timeout=30)
        c.request("GET", "/v1/models", headers={"Authorization": "Bearer " + args.api_key}
                  if args.api_key else {})
        args.model = json.loads(c.getresponse().read())["data"][0]["id"]
    rows = [run_level(args, int(c), words) for c in args.concurrency.split(",")]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("%5s %8s %8s %10s %12s %12s" % ("conc", "requests", "tokens", "tok/s",
                                          "TTFT p50 ms", "ITL p50 ms"))
    for r in rows:
        print("%5d %8d %8d %10.1f %12.1f %12.1f" % (
            r["concurrency"], r["requests"], r["tokens"], r["tokens_per_s"],
            r["ttft_median_ms"] or 0, r["itl_median_ms"] or 0))


if __name__ == "__main__":
    main()
