#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds llama.cpp -- the copy vendored in the llama-cpp-python 0.3.36 sdist
# from PyPI -- OUTSIDE this repository, for side-by-side benchmarks only
# (scripts/bench-llama.sh, scripts/bench-serve.sh).  Nothing of llama.cpp is
# committed here or linked into nvfp4.
#   $NVFP4_CACHE/llama.cpp/src     the extracted sources
#   $NVFP4_CACHE/llama.cpp/build   Release, -march=native, CPU only
#   $NVFP4_CACHE/llama.cpp/build-noamx   the same without ggml's AMX kernels
#                                  (-mno-amx-*), for CPUs that list AMX where
#                                  ggml's AMX path crashes (a Xeon VM here:
#                                  SIGSEGV in llama-bench and llama-server)
# Prints the bin directory (llama-bench, llama-server, llama-cli, ...).
# Usage: scripts/build-llama.sh [--no-amx | --for GGUF]
#   --no-amx    the build without AMX
#   --for GGUF  the first build whose llama-bench runs a 32-token prompt of
#               GGUF (what reaches the AMX GEMM): the default one, else the
#               one without AMX; if neither does, the default one, with a
#               warning (bench-llama.sh then runs it with --repack 0)
# Idempotent: a finished build is reused.
set -eu
CACHE=${NVFP4_CACHE:-$HOME/.cache/nvfp4}
VER=0.3.36
TOP="$CACHE/llama.cpp"
SRC="$TOP/src"

runs() { # BIN GGUF: llama-bench of BIN runs a 32-token prompt of GGUF
    "$1/llama-bench" -m "$2" -p 32 -n 0 -t 1 -r 1 >/dev/null 2>&1
}

case ${1-} in
--for)
    [ -f "${2-}" ] || { echo "build-llama.sh: --for needs a GGUF file, not '${2-}'" >&2; exit 1; }
    def=$("$0" | tail -1)
    if runs "$def" "$2"; then echo "$def"; exit 0; fi
    echo "build-llama.sh: llama.cpp's default build fails on $2; trying one without AMX" >&2
    noamx=$("$0" --no-amx | tail -1)
    if runs "$noamx" "$2"; then echo "$noamx"; exit 0; fi
    echo "build-llama.sh: the build without AMX fails on $2 too" >&2
    echo "$def"; exit 0 ;;
--no-amx) BLD="$TOP/build-noamx" NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
"") BLD="$TOP/build" NOAMX="" ;;
*) echo "build-llama.sh: unknown option '$1' (--no-amx, --for GGUF)" >&2; exit 1 ;;
esac
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
