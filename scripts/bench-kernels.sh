#!/bin/sh
# SPDX-License-Identifier: MIT
# The CPU backend's NVFP4 Linear against a same-run read probe (GEMV) and
# OpenBLAS sgemm (GEMM), 1 and 2 threads, the issue's shapes; then, when
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
