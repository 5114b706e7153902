#!/bin/sh
# SPDX-License-Identifier: MIT
# `nvfp4 inspect --json` against Python's safetensors listing the same file
# (names, dtypes, shapes), on a checkpoint of many tensors written by the real
# safetensors package.  Both timed in the same run, best of 5.
# Usage: scripts/bench/bench-inspect.sh [TENSORS]   (default 6000)
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
N=${1:-6000}
PY="$ROOT/build/venv/bin/python"
NVFP4=${NVFP4:-$ROOT/build/release/tools/nvfp4}
[ -x "$PY" ] || { echo "bench-inspect: needs build/venv (scripts/setup-deps.sh --python)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" - "$tmp/many.safetensors" "$N" <<'PY'
import sys, numpy as np
from safetensors.numpy import save_file
n = int(sys.argv[2])
rng = np.random.default_rng(0)
t = {"model.layers.%d.t%d.weight" % (i // 10, i % 10): rng.standard_normal((4, 8)).astype(np.float32)
     for i in range(n)}
save_file(t, sys.argv[1], metadata={"format": "pt"})
PY
best() {  # best wall time of 5 runs of "$@", in ms
    b=
    for i in 1 2 3 4 5; do
        s=$(date +%s%N); "$@" >/dev/null; e=$(date +%s%N)
        t=$(( (e - s) / 1000000 ))
        [ -z "$b" ] || [ "$t" -lt "$b" ] && b=$t
    done
    echo "$b"
}
c=$(best "$NVFP4" inspect --json "$tmp/many.safetensors")
p=$(best "$PY" -c "
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], 'np') as f:
    for k in f.keys():
        s = f.get_slice(k); s.get_dtype(); s.get_shape()
" "$tmp/many.safetensors")
i=$(best "$PY" -c "pass")
echo "inspect of $N tensors: nvfp4 ${c} ms; python safetensors ${p} ms (interpreter start alone ${i} ms)"
