#!/bin/sh
# SPDX-License-Identifier: MIT
# One command for a machine with a GPU: configure with the GPU backend,
# build, run the GPU tests (every GPU op and the linear paths against
# float64 references and PyTorch's §5 fixture, tolerances stated in
# tests/test-gpu.c; every fixture model against the PyTorch emulation,
# tests/test-gpu-model.c), the GPU benchmarks (libkernels/gpu/bench-gpu.cu: GEMV against
# a device-to-device copy of the same bytes, GEMM 16..4096 tokens against
# cuBLAS BF16) and the end-to-end ones (`nvfp4 bench`, prefill 512 tokens and
# decode 128, on checkpoints `nvfp4 synth` writes at the shapes of
# SmolLM2-135M and Llama-3-8B, GPU and - SmolLM2 only - CPU in the same run),
# and write everything to one file, ${OUT:-.}/gpu-results.txt.
#
#   scripts/gpu-check.sh [cuda|hip] [--quick] [--kit DIR]
#
# --kit DIR: for a machine that reaches no package registry (this
# workplace's lent H200s have the CUDA toolkit and gcc but no autotools,
# jansson, PCRE2 or Check): DIR is made here by scripts/device-kit.sh and
# holds Debian's packages of those libraries (unpacked into a private
# prefix, never installed) and a `make dist` tarball of the tree (configure
# included), which is what gets built.
#
# Builds only for the GPU present (nvidia-smi's compute capability, or
# $GPU_ARCH such as sm_90 / gfx942) so that the whole run stays well under
# 10 minutes on an H200.  Exit status: 0 when the tests passed on a device,
# 1 otherwise (a SKIP - no device seen - counts as a failure here).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENDOR=cuda
QUICK=
KIT=
while [ $# -gt 0 ]; do
    case "$1" in
    cuda | hip) VENDOR=$1 ;;
    --quick) QUICK=--quick ;;
    --kit)
        [ $# -ge 2 ] || { echo "gpu-check.sh: --kit needs a directory" >&2; exit 2; }
        KIT=$(cd "$2" && pwd) || exit 2
        shift
        ;;
    *) echo "gpu-check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
SRC=$ROOT
OUT=${OUT:-.}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RES=$OUT/gpu-results.txt
BUILD=${BUILD:-$ROOT/build/gpu-check-$VENDOR}
JOBS=$(nproc 2>/dev/null || echo 4)
STATUS=$OUT/.gpu-check-status
T0=$(date +%s)
# seconds since the start: the slow optional steps at the end are skipped
# when they would carry the run past the lent machines' 10-minute limit
elapsed() { echo $(($(date +%s) - T0)); }
echo 1 > "$STATUS"

run() {
    echo "== $(date -u +%H:%M:%S) $*"
    "$@"
}

# The libraries of the kit in a private prefix, found through pkg-config
# (their .pc files pointed at the prefix) and LD_LIBRARY_PATH; make and
# pkg-config from the kit only where the machine has none.  The sources are
# the kit's dist tarball.
use_kit() {
    p=/tmp/nvfp4-kit
    rm -rf "$p" && mkdir -p "$p" || return 1
    for d in "$KIT"/debs/*.deb; do
        if command -v dpkg-deb >/dev/null 2>&1; then
            dpkg-deb -x "$d" "$p" || return 1
        else
            (cd "$p" && ar p "$d" data.tar.xz | tar xJf -) || return 1
        fi
    done
    lib=$p/usr/lib/x86_64-linux-gnu
    sed -i "s|=/usr|=$p/usr|" "$lib"/pkgconfig/*.pc "$p"/usr/share/pkgconfig/*.pc 2>/dev/null
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PKG_CONFIG_PATH="$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    command -v make >/dev/null 2>&1 || export PATH="$PATH:$p/usr/bin"
    command -v pkg-config >/dev/null 2>&1 || export PKG_CONFIG="$p/usr/bin/pkgconf"
    rm -rf /tmp/nvfp4-src && mkdir -p /tmp/nvfp4-src || return 1
    tar xzf "$KIT"/nvfp4-*.tar.gz -C /tmp/nvfp4-src || return 1
    SRC=$(echo /tmp/nvfp4-src/nvfp4-*)
    echo "kit: $(ls "$KIT"/debs | tr '\n' ' ')"
    echo "kit: sources $SRC, make $(command -v make), pkg-config ${PKG_CONFIG:-$(command -v pkg-config)}"
}

main() {
    echo "nvfp4 gpu-check ($VENDOR) $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "host: $(uname -srm), $JOBS cores"
    arch_opt=
    if [ "$VENDOR" = cuda ]; then
        nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv \
            2>&1 || echo "nvidia-smi failed"
        nv=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
        "$nv" --version 2>&1 | tail -n 1
        arch=${GPU_ARCH:-}
        if [ -z "$arch" ]; then
            cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
                head -n 1 | tr -d ' .')
            # sm_100 parts take the arch-specific sm_100a build
            case "$cc" in
            "") ;;
            100) arch=sm_100a ;;
            *) arch=sm_$cc ;;
            esac
        fi
        [ -n "$arch" ] && arch_opt="--with-cuda-arch=$arch"
    else
        rocm-smi --showproductname 2>&1 | head -n 20 || echo "rocm-smi failed"
        arch=${GPU_ARCH:-}
        if [ -z "$arch" ] && command -v rocminfo >/dev/null 2>&1; then
            arch=$(rocminfo 2>/dev/null | grep -o 'gfx[0-9a-f]*' | head -n 1)
        fi
        [ -n "$arch" ] && arch_opt="--with-hip-arch=$arch"
    fi

    if [ -n "$KIT" ]; then
        use_kit || return 1
    else
        cd "$ROOT" || return 1
        # configure is not in git: a fresh checkout needs autoconf, automake,
        # libtool and pkg-config (scripts/setup-deps.sh) to make it.
        [ -x configure ] || run autoreconf -fi || return 1
    fi
    mkdir -p "$BUILD" && cd "$BUILD" || return 1
    run "$SRC/configure" -q CFLAGS="-O2 -g" --enable-"$VENDOR" $arch_opt || {
        tail -n 40 config.log
        return 1
    }
    # The plug-in carries no RPATH (m4/nvfp4-gpu.m4): the CUDA runtime comes
    # from the loader's path, which need not hold the toolkit's lib64.
    if [ "$VENDOR" = cuda ]; then
        cudalib=$(sed -n 's/^CUDA_LIBDIR = //p' Makefile)
        [ -n "$cudalib" ] && export LD_LIBRARY_PATH="$cudalib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    echo "== $(date -u +%H:%M:%S) make -j$JOBS"
    make -j"$JOBS" >make.log 2>&1 || {
        tail -n 60 make.log
        return 1
    }
    grep -i 'warning' make.log | head -n 20

    # Tests: the host-side numerics of the kernels and the GPU backend (each
    # linear path is pinned in turn inside test-gpu).  Check's per-test
    # output goes into the results.
    rc=0
    echo "== $(date -u +%H:%M:%S) make check (test-gpu-numerics, test-gpu, test-gpu-model)"
    NVFP4_TEST_GPU_BACKEND=$VENDOR timeout 300 make -j"$JOBS" check \
        TESTS="tests/test-gpu-numerics tests/test-gpu tests/test-gpu-model" >check.log 2>&1 ||
        rc=1
    for t in tests/test-gpu-numerics tests/test-gpu tests/test-gpu-model; do
        echo "== $t"
        cat "$t.log" 2>/dev/null | tail -n 80
        cat "$t.trs" 2>/dev/null | grep ':test-result:'
    done
    if [ ! -f tests/test-gpu.trs ]; then
        echo "gpu-check: tests/test-gpu did not run (is Check installed? see check.log)"
        tail -n 30 check.log
        rc=1
    else
        for t in tests/test-gpu tests/test-gpu-model; do
            if ! grep -q ':test-result: PASS' $t.trs 2>/dev/null; then
                echo "gpu-check: $t did not PASS (SKIP means no device was usable)"
                rc=1
            fi
        done
    fi

    # Benchmarks (time-boxed: they must not eat the machine's budget).
    echo "== $(date -u +%H:%M:%S) bench-gpu-$VENDOR $QUICK"
    timeout 200 "./libkernels/gpu/bench-gpu-$VENDOR" $QUICK || {
        echo "bench-gpu exited with $?"
        rc=1
    }

    # End to end on synthesized checkpoints (random weights, the real shapes;
    # speed does not depend on the values).  Decode reads every weight once
    # per token: its effective bandwidth is set against the best
    # device-to-device copy rate bench-gpu measured above.
    echo "== $(date -u +%H:%M:%S) end to end (nvfp4 synth + nvfp4 bench)"
    syn=${SYNTH_DIR:-$BUILD/synth}
    mkdir -p "$syn"
    d2d=$(grep -o 'd2d-copy *[0-9.]* us *[0-9]* GB/s' "$RES" 2>/dev/null |
        awk '{ if ($4 > m) m = $4 } END { print m + 0 }')
    for preset in smollm2-135m llama3-8b; do
        if [ ! -f "$syn/$preset/config.json" ]; then
            timeout 300 ./tools/nvfp4 synth --preset "$preset" -o "$syn/$preset" || {
                echo "synth $preset failed"
                rc=1
                continue
            }
        fi
        gb=$(du -cb "$syn/$preset"/*.safetensors | tail -n 1 | cut -f1)
        for be in "$VENDOR" cpu; do
            [ "$be" = cpu ] && [ "$preset" != smollm2-135m ] && continue
            line=$(NVFP4_BACKEND_PATH="$BUILD/libkernels/gpu/.libs" timeout 300 ./tools/nvfp4 bench \
                "$syn/$preset" --backend "$be" -p 512 -n 128 --json) || {
                echo "bench $preset on $be failed"
                rc=1
                continue
            }
            echo "$line"
            echo "$line" | awk -v b="$gb" -v d="$d2d" -v p="$preset" -v be="$be" '{
                match($0, /"prefill_tok_s": [0-9.]*/); pre = substr($0, RSTART + 17, RLENGTH - 17)
                match($0, /"decode_tok_s": [0-9.]*/); dec = substr($0, RSTART + 16, RLENGTH - 16)
                bw = b * dec / 1e9
                printf "e2e %-13s %-5s prefill %9.1f tok/s  decode %8.2f tok/s  " \
                       "checkpoint %.2f GB  decode reads %.1f GB/s", p, be, pre, dec, b / 1e9, bw
                if (d > 0 && be != "cpu") printf " = %.2f of the d2d copy rate (%d GB/s r+w)", \
                    bw / d, d
                printf "\n" }'
        done
    done
    # Last (it is slow, and the numbers above matter more): the GPU op tests
    # under compute-sanitizer memcheck, where the machine has it - every
    # device access of every kernel checked; a finding fails the check.
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    if [ "$VENDOR" = cuda ] && [ -n "$cs" ] && [ "$(elapsed)" -gt 450 ]; then
        echo "== compute-sanitizer skipped: $(elapsed) s spent already"
    elif [ "$VENDOR" = cuda ] && [ -n "$cs" ]; then
        echo "== $(date -u +%H:%M:%S) compute-sanitizer memcheck tests/test-gpu"
        NVFP4_TEST_GPU_BACKEND=cuda NVFP4_BACKEND_PATH="$BUILD/libkernels/gpu/.libs" \
            timeout $((560 - $(elapsed))) \
            ./libtool --mode=execute "$cs" --tool memcheck --leak-check no --error-exitcode 9 \
            tests/test-gpu >sanitizer.log 2>&1
        s=$?
        tail -n 25 sanitizer.log
        case $s in
        0) echo "compute-sanitizer: clean" ;;
        124) echo "compute-sanitizer: time limit reached (not a finding)" ;;
        *) echo "compute-sanitizer: exit $s"; rc=1 ;;
        esac
    fi
    echo "== $(date -u +%H:%M:%S) done, status $rc"
    echo "$rc" > "$STATUS"
}

main 2>&1 | tee "$RES"
rc=$(cat "$STATUS")
rm -f "$STATUS"
echo "results: $RES"
exit "$rc"
