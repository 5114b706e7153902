#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds llama.cpp -- the copy vendored in the llama-cpp-python 0.3.36 sdist
# from PyPI -- OUTSIDE this repository, for side-by-side benchmarks only
# (scripts/bench-llama.sh, scripts/bench-serve.sh).  Nothing of llama.cpp is
# committed here or linked into nvfp4.
#   $NVFP4_CACHE/llama.cpp/src     the extracted sources
#   $NVFP4_CACHE/llama.cpp/build   Release, -march=native, CPU only
#   $NVFP4_CACHE/llama.cpp/build-noamx   the same without ggml's AMX kernels
#                                  (--no-amx: -mno-amx-*), for CPUs that list
#                                  AMX where ggml's AMX path crashes (a Xeon
#                                  VM here: SIGSEGV in llama-bench) and which
#                                  would otherwise run with --repack 0
# Prints the bin directory (llama-bench, llama-server, llama-cli, ...).
# Usage: scripts/build-llama.sh [--no-amx]   (idempotent; a finished build is reused)
set -eu
CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
VER=0.3.36
TOP="$CACHE/llama.cpp"
SRC="$TOP/src"
BLD="$TOP/build"
NOAMX=""
if [ "${1-}" = --no-amx ]; then
    BLD="$TOP/build-noamx"
    NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
if [ -x "$BLD/bin/llama-server" ] && [ -x "$BLD/bin/llama-bench" ]; then
    echo "$BLD/bin"; exit 0
fi
command -v cmake >/dev/null || { echo "build-llama.sh: cmake is needed (apt-get install cmake)" >&2; exit 1; }
mkdir -p "$TOP"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "build-llama.sh: fetching llama-cpp-python==$VER (sdist) from PyPI" >&2
    python3 -m pip download --quiet --no-binary :all: --no-deps \
        "llama-cpp-python==$VER" -d "$tmp"
    tar -xzf "$tmp/llama_cpp_python-$VER.tar.gz" -C "$tmp"
    rm -rf "$SRC"
    mv "$tmp/llama_cpp_python-$VER/vendor/llama.cpp" "$SRC"
fi
echo "build-llama.sh: building llama.cpp (Release, native${NOAMX:+, no AMX}) in $BLD" >&2
# an explicit -mno-* wins over -march=native wherever it stands
cmake -S "$SRC" -B "$BLD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$NOAMX" -DCMAKE_CXX_FLAGS="$NOAMX" \
    -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$BLD" -j"$(nproc)" --target llama-bench llama-server llama-cli \
    llama-batched-bench llama-quantize >&2
echo "$BLD/bin"
