#!/bin/sh
# SPDX-License-Identifier: MIT
# Decode and prefill at 1 and 2 (THREADS) threads with and without a
# competing process, for one or two builds of nvfp4 interleaved (issue 19:
# "the default never makes N threads slower than fewer on a busy machine").
#   - the competing process is a busy loop (`sh -c 'while :; do :; done'`,
#     pinned to nothing) started for the "busy" half of every round and
#     stopped by its process id;
#   - every `nvfp4 bench` run (-p PROMPT -n TOKENS -r 1) is one sample; the
#     table gives the best of ROUNDS per model, load, build and thread count,
#     the 1-minute load average seen at the start of each sample (mean), and
#     decode at N threads over decode at 1 in the same build and load.
# The machine is shared: compare ratios within one run, not across runs.
# Usage: scripts/bench-threads.sh [ROUNDS]          (default 3)
#   NEW=path/to/nvfp4 (default: the release build of scripts/build.sh)
#   OLD=path/to/another nvfp4 (optional, e.g. a build of main)
#   MODELS="DIR ..." (default: the Llama-3.2-1B-shaped checkpoint of
#   scripts/bench-llama.sh and a SmolLM2-135M-shaped one written here with
#   `nvfp4 synth --preset smollm2-135m`)  THREADS="1 2"  PROMPT=128  TOKENS=32
#   LOADS="quiet busy"
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${1:-3}
CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
NEW=${NEW:-$ROOT/build/release/tools/nvfp4}
OLD=${OLD:-}
THREADS=${THREADS:-1 2}
P=${PROMPT:-128}
N=${TOKENS:-32}
LOADS=${LOADS:-quiet busy}

[ -x "$NEW" ] || "$ROOT/scripts/build.sh"
SMOL="$CACHE/bench-smollm2-135m/nvfp4"
if [ -z "${MODELS:-}" ]; then
    B1="$CACHE/bench-llama32-1b/nvfp4"
    [ -f "$B1/model.safetensors.index.json" ] || [ -f "$B1/model.safetensors" ] ||
        { echo "bench-threads.sh: no $B1 (scripts/bench-llama.sh writes it)" >&2; exit 1; }
    if [ ! -f "$SMOL/model.safetensors" ]; then
        mkdir -p "$(dirname "$SMOL")"
        "$NEW" synth --preset smollm2-135m --out "$SMOL" >&2
    fi
    MODELS="$B1 $SMOL"
fi

tmp=$(mktemp -d)
busy=
stop_busy() {
    if [ -n "$busy" ]; then
        kill "$busy" 2>/dev/null || :
        wait "$busy" 2>/dev/null || :
        busy=
    fi
}
trap 'stop_busy; rm -rf "$tmp"' EXIT INT TERM
: > "$tmp/results"   # lines: MODEL LOAD ENGINE THREADS PREFILL DECODE LOADAVG

run() { # ENGINE BINARY MODEL THREADS LOAD
    la=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
    out=$("$2" bench "$3" -p "$P" -n "$N" -r 1 --threads "$4" --json 2>/dev/null || :)
    pp=$(echo "$out" | sed -n 's/.*"prefill_tok_s": \([0-9.]*\).*/\1/p')
    tg=$(echo "$out" | sed -n 's/.*"decode_tok_s": \([0-9.]*\).*/\1/p')
    echo "$(basename "$(dirname "$3")") $5 $1 $4 ${pp:-0} ${tg:-0} $la" >> "$tmp/results"
}

r=1
while [ "$r" -le "$ROUNDS" ]; do
    for load in $LOADS; do
        if [ "$load" = busy ]; then
            sh -c 'while :; do :; done' &
            busy=$!
        fi
        for m in $MODELS; do
            for t in $THREADS; do
                run new "$NEW" "$m" "$t" "$load"
                [ -z "$OLD" ] || run old "$OLD" "$m" "$t" "$load"
            done
        done
        stop_busy
    done
    echo "bench-threads.sh: round $r of $ROUNDS done" >&2
    r=$((r + 1))
done

awk '
{ k = $1 " " $2 " " $3 " " $4
  if (!(k in pp) || $5 > pp[k]) pp[k] = $5
  if (!(k in tg) || $6 > tg[k]) tg[k] = $6
  la[k] += $7; n[k]++
  if (!(k in seen)) { order[++nk] = k; seen[k] = 1 }
}
END {
  printf "%-20s %-6s %-4s %3s %12s %11s %8s %10s\n", "model", "load", "lib", "thr",
         "prefill t/s", "decode t/s", "loadavg", "dec/dec@1"
  for (i = 1; i <= nk; i++) {
    k = order[i]; split(k, f, " ")
    b = f[1] " " f[2] " " f[3] " 1"
    ratio = (b in tg) && tg[b] > 0 ? sprintf("%.2f", tg[k] / tg[b]) : "-"
    printf "%-20s %-6s %-4s %3s %12.2f %11.2f %8.2f %10s\n", f[1], f[2], f[3], f[4],
           pp[k], tg[k], la[k] / n[k], ratio
  }
}' "$tmp/results"
