#!/bin/sh
# SPDX-License-Identifier: MIT
# The CPU backend's NVFP4 Linear against two same-run read probes (GEMV: a
# same-size buffer read again and again, and same-size slices of copies whose
# total exceeds the L3, the kernel cycling over as many copies of its weight;
# the ratio is to the out-of-cache one), batched decode (B tokens per call
# against B one-token GEMVs and the probe) and OpenBLAS sgemm (GEMM), 1 and 2
# threads, the decode shapes of SmolLM2, Llama-3.2-1B, Llama-3-8B, Qwen3-30B-A3B's
# experts and a BF16 vocabulary head; then, when
# build/venv has torch, the PyTorch emulation of the same layers
# (scripts/bench-kernels-torch.py).  A shared machine makes single runs
# noisy: every figure is the best of repetitions, kernel and reference
# interleaved.  Extra arguments go to bench-kernels (e.g. -t 1 -s 4096x4096).
# Usage: scripts/bench-kernels.sh [bench-kernels options]
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/release}
if [ ! -x "$BUILD/bench/bench-kernels" ]; then
    mkdir -p "$BUILD"
    (cd "$BUILD" && { [ -f Makefile ] || "$ROOT/configure" -q CFLAGS='-O2 -g'; } &&
        make -j2 bench/bench-kernels >/dev/null)
fi
# Passive waiting: with neighbours on the cores, spinning OpenMP threads
# steal the time the other worker needs.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
"$BUILD/bench/bench-kernels" "$@"
PY=$ROOT/build/venv/bin/python
if [ -x "$PY" ] && "$PY" -c 'import torch' 2>/dev/null; then
    "$PY" "$ROOT/scripts/bench-kernels-torch.py"
fi
