#!/bin/sh
# SPDX-License-Identifier: MIT
# Tensor parallelism on the CPU: 2 ranks x 1 thread (mpirun -np 2) against
# 1 process x 2 threads, on a Llama-3.2-1B-shaped `nvfp4 synth` checkpoint
# (1.07 GB; written once into $NVFP4_CACHE/bench-mpi-llama32-1b).  Runs the
# two interleaved ROUNDS times (default 3) and prints every `nvfp4 bench`
# result: prefill and decode tokens/s, and under mpirun each rank's resident
# memory after loading and bytes sent per token.  Take the best of each: the
# machine may be shared.
#   scripts/bench-mpi.sh [BUILD_DIR]      (default build/dev)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BLD=${1:-$ROOT/build/dev}
TOOL=$BLD/tools/nvfp4
CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
M=$CACHE/bench-mpi-llama32-1b
ROUNDS=${ROUNDS:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ ! -f "$M/model.safetensors" ]; then
    mkdir -p "$M"
    cat > "$M.config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
 "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 8,
 "head_dim": 64, "num_hidden_layers": 16, "vocab_size": 128256,
 "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
 "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                  "original_max_position_embeddings": 8192, "rope_type": "llama3"},
 "tie_word_embeddings": true, "bos_token_id": 128000, "eos_token_id": 128001,
 "hidden_act": "silu", "torch_dtype": "bfloat16"}
JSON
    "$TOOL" synth --like "$M.config.json" --out "$M"
fi
for r in $(seq 1 "$ROUNDS"); do
    echo "== round $r: 1 process x 2 threads"
    OMP_NUM_THREADS=2 "$TOOL" bench "$M" -p 128 -n 16 -r 2 --threads 2
    echo "== round $r: 2 ranks x 1 thread"
    OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 \
        "$TOOL" bench "$M" -p 128 -n 16 -r 2 --threads 1
done
