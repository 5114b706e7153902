#!/bin/sh
# One command for a machine with a GPU: configure with the GPU backend,
# build, run the GPU tests (every GPU op and the linear paths against
# float64 references and PyTorch's §5 fixture, tolerances stated in
# tests/test-gpu.c) and the GPU benchmarks (gpu/bench-gpu.cu: GEMV against a
# device-to-device copy of the same bytes, GEMM 16..4096 tokens against
# cuBLAS BF16), and write everything to one file, ${OUT:-.}/gpu-results.txt.
#
#   scripts/gpu-check.sh [cuda|hip] [--quick]
#
# Builds only for the GPU present (nvidia-smi's compute capability, or
# $GPU_ARCH such as sm_90 / gfx942) so that the whole run stays well under
# 10 minutes on an H200.  Exit status: 0 when the tests passed on a device,
# 1 otherwise (a SKIP - no device seen - counts as a failure here).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENDOR=cuda
QUICK=
for a in "$@"; do
    case "$a" in
    cuda | hip) VENDOR=$a ;;
    --quick) QUICK=--quick ;;
    *) echo "gpu-check.sh: unknown argument $a" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-.}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RES=$OUT/gpu-results.txt
BUILD=${BUILD:-$ROOT/build/gpu-check-$VENDOR}
JOBS=$(nproc 2>/dev/null || echo 4)
STATUS=$OUT/.gpu-check-status
echo 1 > "$STATUS"

run() {
    echo "== $(date -u +%H:%M:%S) $*"
    "$@"
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

    cd "$ROOT" || return 1
    # configure is not in git: a fresh checkout needs autoconf, automake,
    # libtool and pkg-config (scripts/setup-deps.sh) to make it.
    [ -x configure ] || run autoreconf -fi || return 1
    mkdir -p "$BUILD" && cd "$BUILD" || return 1
    run "$ROOT/configure" -q CFLAGS="-O2 -g" --enable-"$VENDOR" $arch_opt || {
        tail -n 40 config.log
        return 1
    }
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
    echo "== $(date -u +%H:%M:%S) make check (test-gpu-numerics, test-gpu)"
    NVFP4_TEST_GPU_BACKEND=$VENDOR timeout 300 make -j"$JOBS" check \
        TESTS="tests/test-gpu-numerics tests/test-gpu" >check.log 2>&1 || rc=1
    for t in tests/test-gpu-numerics tests/test-gpu; do
        echo "== $t"
        cat "$t.log" 2>/dev/null | tail -n 80
        cat "$t.trs" 2>/dev/null | grep ':test-result:'
    done
    if [ ! -f tests/test-gpu.trs ]; then
        echo "gpu-check: tests/test-gpu did not run (is Check installed? see check.log)"
        tail -n 30 check.log
        rc=1
    elif ! grep -q ':test-result: PASS' tests/test-gpu.trs; then
        echo "gpu-check: tests/test-gpu did not PASS (SKIP means no device was usable)"
        rc=1
    fi

    # Benchmarks (time-boxed: they must not eat the machine's budget).
    echo "== $(date -u +%H:%M:%S) bench-gpu-$VENDOR $QUICK"
    timeout 240 "./gpu/bench-gpu-$VENDOR" $QUICK || {
        echo "bench-gpu exited with $?"
        rc=1
    }
    echo "== $(date -u +%H:%M:%S) done, status $rc"
    echo "$rc" > "$STATUS"
}

main 2>&1 | tee "$RES"
rc=$(cat "$STATUS")
rm -f "$STATUS"
echo "results: $RES"
exit "$rc"
