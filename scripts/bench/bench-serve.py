#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Load generator for `nvfp4 serve` (standard library only).

For each concurrency C, C clients each send REQUESTS streamed completions
(greedy, fixed prompt of token ids, max_tokens N, ignoring EOS is not needed:
a random-weight synth model rarely emits it) back to back; reported: the
aggregate generated tokens/s, median time to first token and median
inter-token latency (between consecutive streamed chunks).

  scripts/bench/bench-serve.py --port 8000 [--concurrency 1,4,16,32]
      [--requests 4] [--max-tokens 64] [--prompt-tokens 32] [--json]
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time


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
    stamps, tokens = [], 0
    for line in r:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        ev = json.loads(line[6:])
        if ev.get("choices") and ev["choices"][0].get("logprobs"):
            n = len(ev["choices"][0]["logprobs"]["tokens"])
            if n:
                stamps.append(time.perf_counter())
                tokens += n
    c.close()
    return t0, stamps, tokens


def run_level(args, conc):
    body = json.dumps({"model": args.model, "prompt": [(17 * i + 5) % 1000 + 100
                                                         for i in range(args.prompt_tokens)],
                       "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
                       "logprobs": 0})
    ttft, itl, total = [], [], [0]
    lock = threading.Lock()
    errors = []

    def client():
        for _ in range(args.requests):
            try:
                t0, st, n = one_request(args.host, args.port, body, args.api_key)
            except Exception as e:   # noqa: BLE001 - reported below
                errors.append(str(e))
                return
            with lock:
                if st:
                    ttft.append(st[0] - t0)
                    itl.extend(b - a for a, b in zip(st, st[1:]))
                total[0] += n

    ts = [threading.Thread(target=client) for _ in range(conc)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        print("errors at concurrency %d: %s" % (conc, errors[:3]), file=sys.stderr)
    return {"concurrency": conc, "requests": conc * args.requests, "tokens": total[0],
            "seconds": wall, "tokens_per_s": total[0] / wall,
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
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.model is None:
        c = http.client.HTTPConnection(args.host, args.port, timeout=30)
        c.request("GET", "/v1/models", headers={"Authorization": "Bearer " + args.api_key}
                  if args.api_key else {})
        args.model = json.loads(c.getresponse().read())["data"][0]["id"]
    rows = [run_level(args, int(c)) for c in args.concurrency.split(",")]
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
