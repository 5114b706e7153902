#!/bin/sh
# SPDX-License-Identifier: MIT
# The main job on a fresh Debian machine: install what is needed, build, make
# the bundled default model (SmolLM2-135M-Instruct quantized to NVFP4 by AMD
# Quark; built once into ${NVFP4_CACHE:-~/.cache/nvfp4}, reused afterwards),
# then generate text and measure perplexity on the evaluation text.
#
# Environment: NVFP4_CACHE (model cache), NVFP4_BACKEND (cpu|cuda|hip),
# OMP_NUM_THREADS.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

"$ROOT/scripts/setup-deps.sh" --python
"$ROOT/scripts/build.sh"
NVFP4="$ROOT/build/release/tools/nvfp4"

CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
MODEL="$CACHE/smollm2-135m-nvfp4"
if [ ! -f "$MODEL/reference.json" ]; then
    echo "== building the default model into $MODEL (first run only; a few minutes)"
    "$ROOT/scripts/fixtures/make-smollm2.sh"
fi

echo "== the model"
"$NVFP4" inspect "$MODEL" | sed -n '1,3p'

echo "== nvfp4 generate"
"$NVFP4" generate "$MODEL" --stats -n 48 \
    --prompt "The GNU General Public License is a free software license that"

# The evaluation text and first-window token the PyTorch reference used.
EVAL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["eval"]["file"])' "$MODEL/reference.json")
PREFIX=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["eval"]["prefix_token"])' "$MODEL/reference.json")
echo "== nvfp4 ppl (evaluation text: $EVAL)"
"$NVFP4" ppl "$MODEL" --text "$EVAL" --ctx 512 --prefix "$PREFIX"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); p=r["perplexity_emulation"]; print("PyTorch emulation (reference.json): token perplexity %.4f, word perplexity %.4f" % (p["token_perplexity"], p["word_perplexity"]))' "$MODEL/reference.json"
