#!/bin/sh
# SPDX-License-Identifier: MIT
# nvfp4 against llama.cpp on a Llama-3.2-1B- or Llama-3-8B-shaped
# checkpoint, side by side in one run (issue 19; docs/perf-anchors.md):
#   - `nvfp4 synth --like` writes the checkpoint into $NVFP4_CACHE:
#     --shape 1b (default): bench-llama32-1b, hidden 2048, 16 layers, vocab
#     128256, tied 16-bit head: about 1.07 GB read per token; --shape 8b:
#     bench-llama3-8b, hidden 4096, 32 layers, untied 16-bit head: about
#     5.0 GB read per token (the embedding table is not read whole), about
#     6 GB on disk and as much again for its GGUF;
#   - scripts/bench/gguf_llama.py (the `gguf` package) writes the matching
#     GGUF files there: Q4_0 weights with the same 16-bit head (the same
#     bytes per token: Q4_0 is 4.5 bits per weight like NVFP4), and, for
#     1b only, llama.cpp's default Q4_0 layout (what llama-quantize makes
#     of a tied model: the shared embedding/head as Q6_K);
#   - llama-bench (scripts/build-llama.sh builds llama.cpp outside this
#     repository) and `nvfp4 bench`, at 1 and 2 threads, best of 3 rounds,
#     the engines interleaved within each round, with a 1 GiB read probe
#     (bench/bench-kernels -P 1024) beside each round.
# Both engines decode N tokens after the P-token prompt (llama-bench -d P),
# so their attention reads the same context.  Prints prefill and decode
# tok/s, decode as a fraction of the bandwidth bound (probe GB/s / bytes
# read per token: the weights, and the weights plus the KV cache read at
# the mean decode position: float32 in nvfp4, F16 in llama.cpp) and the
# nvfp4 / llama.cpp ratios.  The weights are random: speed only.
# Usage: scripts/bench-llama.sh [--shape 1b|8b] [ROUNDS]     (default 1b, 3;
#   ROUNDS 0 only writes the files)
#   NVFP4=path/to/nvfp4  BENCH_KERNELS=path/to/bench-kernels (default: the
#   release build of scripts/build.sh)  PY=python with gguf (default
#   build/venv/bin/python)  LLAMA_BIN=dir of llama-bench  THREADS="1 2"
#   PROMPT=512  TOKENS=128  LLAMA_EXTRA="more llama-bench options"
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
SHAPE=1b
if [ "${1-}" = --shape ]; then
    SHAPE=${2-}
    shift 2 || { echo "bench-llama.sh: --shape needs 1b or 8b" >&2; exit 1; }
fi
case $SHAPE in
1b) DIR="$CACHE/bench-llama32-1b" NAME=llama32-1b TITLE="Llama-3.2-1B" ;;
8b) DIR="$CACHE/bench-llama3-8b" NAME=llama3-8b TITLE="Llama-3-8B" ;;
*) echo "bench-llama.sh: --shape is 1b or 8b, not '$SHAPE'" >&2; exit 1 ;;
esac
ROUNDS=${1:-3}
NVFP4=${NVFP4:-$ROOT/build/release/tools/nvfp4}
BENCH_KERNELS=${BENCH_KERNELS:-$(dirname "$(dirname "$NVFP4")")/bench/bench-kernels}
PY=${PY:-$ROOT/build/venv/bin/python}
THREADS=${THREADS:-1 2}
P=${PROMPT:-512}
N=${TOKENS:-128}

[ -x "$NVFP4" ] || "$ROOT/scripts/build.sh"
[ -x "$BENCH_KERNELS" ] || { echo "bench-llama.sh: no $BENCH_KERNELS (make bench/bench-kernels)" >&2; exit 1; }
"$PY" -c 'import gguf, numpy' 2>/dev/null ||
    { echo "bench-llama.sh: $PY lacks the gguf package (scripts/fixtures/setup-venv.sh)" >&2; exit 1; }

mkdir -p "$DIR"
if [ "$SHAPE" = 8b ]; then
# Llama-3-8B's architecture (meta-llama/Meta-Llama-3-8B config.json)
cat > "$DIR/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
 "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
 "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
 "hidden_act": "silu", "tie_word_embeddings": false, "bos_token_id": 128000,
 "eos_token_id": 128001, "dtype": "bfloat16"}
EOF
else
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
fi
CK="$DIR/nvfp4"
if [ ! -f "$CK/model.safetensors.index.json" ] && [ ! -f "$CK/model.safetensors" ]; then
    echo "bench-llama.sh: nvfp4 synth --like $DIR/config.json --out $CK" >&2
    "$NVFP4" synth --like "$DIR/config.json" --out "$CK" >&2
fi
G16="$DIR/$NAME-q4_0-f16head.gguf"
GQ6="$DIR/$NAME-q4_0.gguf"
[ -f "$G16" ] || "$PY" "$ROOT/scripts/bench/gguf_llama.py" "$DIR/config.json" "$G16" --head f16
# the 8B pair only (the Q6_K file would be 5 GB more)
[ "$SHAPE" = 8b ] || [ -f "$GQ6" ] ||
    "$PY" "$ROOT/scripts/bench/gguf_llama.py" "$DIR/config.json" "$GQ6" --head q6_k
[ "$ROUNDS" -gt 0 ] || { echo "bench-llama.sh: files ready in $DIR" >&2; exit 0; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/results"   # lines: ENGINE THREADS PREFILL DECODE ROUND

# ggml picks its AMX kernels where the CPU lists AMX; a sandbox that does
# not grant AMX state kills them with SIGILL, and on a Xeon VM here they
# died with SIGSEGV: then llama.cpp built without them (build-llama.sh
# --for picks that build, which keeps its repacked Q4_0 kernels), and if
# that fails too, without ggml's extra buffer types (--repack 0: no AMX,
# no repacked Q4_0); the table says which.
LLAMA_BIN=${LLAMA_BIN:-$("$ROOT/scripts/build-llama.sh" --for "$G16" | tail -1)}
LLAMA_EXTRA=${LLAMA_EXTRA-}
LLAMA_HOW=${LLAMA_EXTRA:-with its defaults}
case $LLAMA_BIN in */build-noamx/bin) LLAMA_HOW="built without AMX (its AMX kernels crash here)" ;; esac
if [ -z "$LLAMA_EXTRA" ] &&
    ! "$LLAMA_BIN/llama-bench" -m "$G16" -p 32 -n 0 -t 1 -r 1 >/dev/null 2>&1; then
    echo "bench-llama.sh: llama-bench failed with its defaults; running it with --repack 0" >&2
    LLAMA_EXTRA="--repack 0"
    LLAMA_HOW=$LLAMA_EXTRA
fi

llama_run() { # GGUF THREADS -> "pp tg"
    # the prompt from an empty cache, then the decode after a cache of P
    # tokens (-d: what nvfp4 bench decodes after)
    # shellcheck disable=SC2086
    { "$LLAMA_BIN/llama-bench" -m "$1" -p "$P" -n 0 -t "$2" -r 1 $LLAMA_EXTRA -o csv &&
        "$LLAMA_BIN/llama-bench" -m "$1" -p 0 -n "$N" -d "$P" -t "$2" -r 1 $LLAMA_EXTRA \
            -o csv | sed 1d; } 2>/dev/null |
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
        export OMP_NUM_THREADS="$t"
        pa=$(probe "$t")
        echo "nvfp4 $t $(nvfp4_run "$t") $r" >> "$tmp/results"
        echo "q4_0-16 $t $(llama_run "$G16" "$t") $r" >> "$tmp/results"
        [ "$SHAPE" = 8b ] || echo "q4_0-q6k $t $(llama_run "$GQ6" "$t") $r" >> "$tmp/results"
        pb=$(probe "$t")
        echo "probe $t $pa $pb $r" >> "$tmp/results"
    done
    echo "bench-llama.sh: round $r of $ROUNDS done ($(cut -d' ' -f1-3 /proc/loadavg))" >&2
    r=$((r + 1))
done

"$PY" - "$tmp/results" "$CK" "$G16" "$GQ6" "$P" "$N" "$(cat /proc/loadavg)" "$LLAMA_HOW" \
    "$TITLE" "$DIR/config.json" <<'PY'
import json, os, sys
res, ck, g16, gq6, P, N, load, extra, title, cfg = sys.argv[1:11]
rows = [l.split() for l in open(res) if l.strip()]
c = json.load(open(cfg))
tied = c.get("tie_word_embeddings", False)

# bytes read per decoded token: every weight once (the tied head is the
# embedding table; an untied model's embedding table is read one row a
# token: not counted), from the files themselves
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
            if k == "__metadata__" or (not tied and k == "model.embed_tokens.weight"):
                continue
            a, b = v["data_offsets"]
            total += b - a
    return total

def gguf_bytes(path):
    from gguf import GGUFReader
    return sum(int(t.n_bytes) for t in GGUFReader(path).tensors
               if tied or t.name != "token_embd.weight")

bpt = {"nvfp4": st_bytes(ck), "q4_0-16": gguf_bytes(g16)}
if os.path.exists(gq6) and any(r[0] == "q4_0-q6k" for r in rows):
    bpt["q4_0-q6k"] = gguf_bytes(gq6)
# the KV cache attention reads per decoded token at the mean decode
# position P + (N - 1) / 2: K and V of every layer, float32 in nvfp4's
# CPU backend, F16 in llama.cpp (its default -ctk/-ctv)
L, nkv = c["num_hidden_layers"], c["num_key_value_heads"]
hd = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
pos = int(P) + (int(N) - 1) / 2
kv = {"nvfp4": L * 2 * nkv * hd * 4 * pos}
kv["q4_0-16"] = kv["q4_0-q6k"] = kv["nvfp4"] / 2
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
print("%s shape (random weights), prompt %s, decode %s tokens; best of %d rounds, "
      "engines interleaved" % (title, P, N, rounds))
print("load average at the end: %s; llama-bench %s; both decode after the %s-token "
      "prompt (llama-bench -d %s)"
      % (" ".join(load.split()[:3]), extra, P, P))
print("GB/token: the weights; KV GB: the KV cache read a token at position %.0f; "
      "dec/bound: decode / (probe / weights); +KV: / (probe / (weights + KV))" % pos)
print("%-30s %3s %9s %9s %9s %9s %9s %9s %9s" % ("", "th", "prefill", "decode", "GB/token",
                                                 "KV GB", "probe", "dec/bound", "+KV"))
for t in threads:
    ps = [v for (tt, _), v in probe.items() if tt == t]
    print("%-30s %3d %9s %9s %9s %9s %9.1f %9s" % ("read probe, 1 GiB (max/min)", t, "", "",
                                                    "", "", max(ps), "%.1f" % min(ps)))
    for e in ("nvfp4", "q4_0-16", "q4_0-q6k"):
        if (e, t) not in best:
            continue
        pp, tg, pb = best[(e, t)]
        if tg <= 0:
            print("%-30s %3d   (failed)" % (names[e], t))
            continue
        bound = pb * 1e9 / bpt[e]
        boundkv = pb * 1e9 / (bpt[e] + kv[e])
        print("%-30s %3d %9.1f %9.2f %9.3f %9.3f %9.1f %9.2f %9.2f"
              % (names[e], t, pp, tg, bpt[e] / 1e9, kv[e] / 1e9, pb, tg / bound, tg / boundkv))
    n = best.get(("nvfp4", t))
    for e in ("q4_0-16", "q4_0-q6k"):
        l = best.get((e, t))
        if n and l and l[0] > 0 and l[1] > 0:
            print("%-30s %3d %8.2fx %8.2fx" % ("nvfp4 / " + names[e][10:], t, n[0] / l[0],
                                              n[1] / l[1]))
PY
