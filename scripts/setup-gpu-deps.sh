#!/bin/sh
# SPDX-License-Identifier: MIT
# GPU toolchains for --enable-cuda / --enable-hip (called by
# scripts/setup-deps.sh --gpu; the default CI run stays without them).
#
# HIP: Debian's own packages, enough to COMPILE the HIP backend without an
# AMD GPU (running it needs the ROCm kernel driver and a device):
#   hipcc            the compiler driver (pulls clang-15, lld-15, rocm-device-libs)
#   libamdhip64-dev  HIP runtime headers and libamdhip64.so
# CUDA: the toolkit (nvcc, libcudart, cuBLAS for the benchmark) is not in
# Debian main; install NVIDIA's CUDA toolkit (12.x or 13.x) so that nvcc is
# on PATH or in /usr/local/cuda/bin, or Debian non-free's nvidia-cuda-toolkit.
set -eu
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo

PKGS="hipcc libamdhip64-dev"
# The device communicators (libkernels/gpu/comm-gpu.cu: NCCL, RCCL) need no
# header: they dlopen() libnccl.so.2 / librccl.so.1 at run time and call them
# through libkernels/gpu/comm-abi.h.  RCCL's header, where the distribution
# packages it (not Debian 12), lets configure check those declarations at
# compile time (HAVE_RCCL_H), as the CUDA toolkit's nccl.h does for NCCL.
if apt-cache show librccl-dev >/dev/null 2>&1; then
    PKGS="$PKGS librccl-dev"
fi
missing=
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup-gpu-deps: installing$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        $missing >/dev/null
fi
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup-gpu-deps: nvcc found"
else
    echo "setup-gpu-deps: nvcc not found: install NVIDIA's CUDA toolkit for --enable-cuda" >&2
fi
