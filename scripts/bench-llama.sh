#!/bin/sh
# SPDX-License-Identifier: MIT
# nvfp4 against llama.cpp on a Llama-3.2-1B-shaped checkpoint, side by side
# in one run (issue 19; docs/perf-anchors.md):
#   - `nvfp4 synth --like` writes the checkpoint (hidden 2048, 16 layers,
#     vocab 128256, tied 16-bit head: about 1.07 GB read per token) into
#     $NVFP4_CACHE/bench-llama32-1b;
#   - scripts/bench/gguf_llama.py (the `gguf` package) writes the matching
#     GGUF files there: Q4_0 weights with the same 16-bit head (the same
#     bytes per token: Q4_0 is 4.5 bits per weight like NVFP4), and
#     llama.cpp's default Q4_0 layout (what llama-quantize makes of a tied
#     model: the shared embedding/head as Q6_K);
#   - llama-bench (scripts/build-llama.sh builds llama.cpp outside this
#     repository) and `nvfp4 bench`, at 1 and 2 threads, best of 3 rounds,
#     the engines interleaved within each round, with a 1 GiB read probe
#     (bench/bench-kernels -P 1024) beside each round.
# Prints prefill and decode tok/s, decode as a fraction of the bandwidth
# bound (probe GB/s / bytes read per token) and the nvfp4 / llama.cpp
# ratios.  The weights are random: speed only.
# Usage: scripts/bench-llama.sh [ROUNDS]     (default 3)
#   NVFP4=path/to/nvfp4  BENCH_KERNELS=path/to/bench-kernels (default: the
#   release build of scripts/build.sh)  PY=python with gguf (default
#   build/venv/bin/python)  LLAMA_BIN=dir of llama-bench  THREADS="1 2"
#   PROMPT=512  TOKENS=128  LLAMA_EXTRA="more llama-bench options"
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${1:-3}
CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
NVFP4=${NVFP4:-$ROOT/build/release/tools/nvfp4}
BENCH_KERNELS=${BENCH_KERNELS:-$(dirname "$(dirname "$NVFP4")")/bench/bench-kernels}
PY=${PY:-$ROOT/build/venv/bin/python}
LLAMA_BIN=${LLAMA_BIN:-$CACHE/llama.cpp/build/bin}
THREADS=${THREADS:-1 2}
P=${PROMPT:-512}
N=${TOKENS:-128}
DIR="$CACHE/bench-llama32-1b"

[ -x "$NVFP4" ] || "$ROOT/scripts/build.sh"
[ -x "$BENCH_KERNELS" ] || { echo "bench-llama.sh: no $BENCH_KERNELS (make bench/bench-kernels)" >&2; exit 1; }
[ -x "$LLAMA_BIN/llama-bench" ] || LLAMA_BIN=$("$ROOT/scripts/build-llama.sh" | tail -1)
"$PY" -c 'import gguf, numpy' 2>/dev/null ||
    { echo "bench-llama.sh: $PY lacks the gguf package (scripts/fixtures/setup-venv.sh)" >&2; exit 1; }

mkdir -p "$DIR"
# Llama-3.2-1B's architecture (meta-llama/Llama-3.2-1B config.json)
cat > "$DIR/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
 "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
 "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
 "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
 "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                  "original_max_position_embeddings": 8192, "rope_type": "llama3"},
 "hidden_act": "silu", "tie_word_embeddings": true, "bos_token_id": 128000,
 "eos_token_id": 128001, "dtype": "bfloat16"}
EOF
CK="$DIR/nvfp4"
if [ ! -f "$CK/model.safetensors.index.json" ] && [ ! -f "$CK/model.safetensors" ]; then
    echo "bench-llama.sh: nvfp4 synth --like $DIR/config.json --out $CK" >&2
    "$NVFP4" synth --like "$DIR/config.json" --out "$CK" >&2
fi
G16="$DIR/llama32-1b-q4_0-f16head.gguf"
GQ6="$DIR/llama32-1b-q4_0.gguf"
[ -f "$G16" ] || "$PY" "$ROOT/scripts/bench/gguf_llama.py" "$DIR/config.json" "$G16" --head f16
[ -f "$GQ6" ] || "$PY" "$ROOT/scripts/bench/gguf_llama.py" "$DIR/config.json" "$GQ6" --head q6_k

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/results"   # lines: ENGINE THREADS PREFILL DECODE ROUND

# ggml picks its AMX kernels where the CPU lists AMX; a sandbox that does
# not grant AMX state kills them with SIGILL: then without ggml's extra
# buffer types (--repack 0: no AMX, no repacked Q4_0), said in the table;
# a prompt of 32 tokens reaches the AMX GEMM (one token does not)
LLAMA_EXTRA=${LLAMA_EXTRA-}
if [ -z "$LLAMA_EXTRA" ] &&
    ! "$LLAMA_BIN/llama-bench" -m "$G16" -p 32 -n 0 -t 1 -r 1 -o csv >/dev/null 2>&1; then
    echo "bench-llama.sh: llama-bench failed with its defaults; running it with --repack 0" >&2
    LLAMA_EXTRA="--repack 0"
fi

llama_run() { # GGUF THREADS -> "pp tg"
    # shellcheck disable=SC2086
    "$LLAMA_BIN/llama-bench" -m "$1" -p "$P" -n "$N" -t "$2" -r 1 $LLAMA_EXTRA -o csv 2>/dev/null |
        "$PY" -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
pp = [r for r in rows if r["n_prompt"] != "0"][0]["avg_ts"]
tg = [r for r in rows if r["n_gen"] != "0"][0]["avg_ts"]
print("%.2f %.2f" % (float(pp), float(tg)))' || echo "0 0"
}

nvfp4_run() { # THREADS -> "pp tg"
    "$NVFP4" bench "$CK" -p "$P" -n "$N" -r 1 --threads "$1" --json 2>/dev/null |
        "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print("%.2f %.2f" % (d["prefill_tok_s"], d["decode_tok_s"]))' || echo "0 0"
}

probe() { # THREADS -> GB/s
    "$BENCH_KERNELS" -P 1024 -t "$1" | sed -n 's/.* \([0-9.]*\) GB\/s$/\1/p'
}

# a round: for each thread count a probe, the three engines, a probe; the
# round's bound uses the mean of its two probes
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for t in $THREADS; do
        export OMP_NUM_THREADS=$t
        pa=$(probe "$t")
        echo "nvfp4 $t $(nvfp4_run "$t") $r" >> "$tmp/results"
        echo "q4_0-16 $t $(llama_run "$G16" "$t") $r" >> "$tmp/results"
        echo "q4_0-q6k $t $(llama_run "$GQ6" "$t") $r" >> "$tmp/results"
        pb=$(probe "$t")
        echo "probe $t $pa $pb $r" >> "$tmp/results"
    done
    echo "bench-llama.sh: round $r of $ROUNDS done ($(cut -d' ' -f1-3 /proc/loadavg))" >&2
    r=$((r + 1))
done

"$PY" - "$tmp/results" "$CK" "$G16" "$GQ6" "$P" "$N" "$(cat /proc/loadavg)" "$LLAMA_EXTRA" <<'PY'
import json, os, sys
res, ck, g16, gq6, P, N, load, extra = sys.argv[1:9]
rows = [l.split() for l in open(res) if l.strip()]

# bytes read per decoded token: every weight once (the tied head is the
# embedding table), from the files themselves
def st_bytes(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) \
        else ["model.safetensors"]
    total = 0
    for f in files:
        with open(os.path.join(d, f), "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            hdr = json.loads(fh.read(n))
        for k, v in hdr.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            total += b - a
    return total

def gguf_bytes(path):
    from gguf import GGUFReader
    return sum(int(t.n_bytes) for t in GGUFReader(path).tensors)

bpt = {"nvfp4": st_bytes(ck), "q4_0-16": gguf_bytes(g16), "q4_0-q6k": gguf_bytes(gq6)}
names = {"nvfp4": "nvfp4 W4A4, BF16 head",
         "q4_0-16": "llama.cpp Q4_0, F16 head",
         "q4_0-q6k": "llama.cpp Q4_0, Q6_K head"}
threads = sorted({int(r[1]) for r in rows})
probe = {(int(t), int(r)): (float(a) + float(b)) / 2 for e, t, a, b, r in rows if e == "probe"}
# best of the rounds: the fastest prefill and the fastest decode (each with
# its own round's bound)
best = {}
for e, t, pp, tg, r in rows:
    if e == "probe":
        continue
    t, r = int(t), int(r)
    pp, tg = float(pp), float(tg)
    b = best.setdefault((e, t), [0.0, 0.0, 0.0])
    b[0] = max(b[0], pp)
    if tg > b[1]:
        b[1], b[2] = tg, probe[(t, r)]
rounds = len({r for *_, r in rows})
print("Llama-3.2-1B shape (random weights), prompt %s, decode %s tokens; best of %d rounds, "
      "engines interleaved" % (P, N, rounds))
print("load average at the end: %s; llama-bench %s; nvfp4 decodes after the %s-token "
      "prompt, llama-bench's tg from an empty cache"
      % (" ".join(load.split()[:3]), extra or "with its defaults", P))
print("%-30s %3s %9s %9s %9s %9s %9s" % ("", "th", "prefill", "decode", "GB/token",
                                          "probe", "dec/bound"))
for t in threads:
    ps = [v for (tt, _), v in probe.items() if tt == t]
    print("%-30s %3d %9s %9s %9s %9.1f %9s" % ("read probe, 1 GiB (max/min)", t, "", "", "",
                                               max(ps), "%.1f" % min(ps)))
    for e in ("nvfp4", "q4_0-16", "q4_0-q6k"):
        if (e, t) not in best:
            continue
        pp, tg, pb = best[(e, t)]
        if tg <= 0:
            print("%-30s %3d   (failed)" % (names[e], t))
            continue
        bound = pb * 1e9 / bpt[e]
        print("%-30s %3d %9.1f %9.2f %9.3f %9.1f %9.2f" % (names[e], t, pp, tg, bpt[e] / 1e9,
                                                          pb, tg / bound))
    n = best.get(("nvfp4", t))
    for e in ("q4_0-16", "q4_0-q6k"):
        l = best.get((e, t))
        if n and l and l[0] > 0 and l[1] > 0:
            print("%-30s %3d %8.2fx %8.2fx" % ("nvfp4 / " + names[e][10:], t, n[0] / l[0],
                                              n[1] / l[1]))
PY
