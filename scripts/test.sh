#!/bin/sh
# SPDX-License-Identifier: MIT
# The whole test suite from a clean clone on a fresh Debian machine:
# install dependencies, build, run `make check`, the suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer and under valgrind (memcheck),
# and `make distcheck`; ThreadSanitizer on test-context's two threads sharing
# one model; the tree built at -O0 with gcc and with clang (its libraries'
# NEEDED entries and RUNPATHs checked, nothing run).
#
#   scripts/test.sh            everything above (about 15 minutes on 2 cores)
#   scripts/test.sh --quick    one plain build and make check
#   NVFP4_VALGRIND=0 scripts/test.sh   skip the valgrind pass
#   NVFP4_FUZZ=0 scripts/test.sh       skip the fuzz regression (20 s per harness)
#   NVFP4_GPU_COMPILE=0 scripts/test.sh  skip compiling the CUDA/HIP backends
#   NVFP4_DEB=0 scripts/test.sh          skip the Debian packages (scripts/deb-check.sh)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
quick=0
[ "${1:-}" = "--quick" ] && quick=1
JOBS=$(nproc 2>/dev/null || echo 2)

"$ROOT/scripts/setup-deps.sh"

echo "== autoreconf"
autoreconf -fi >/dev/null 2>&1 || autoreconf -fi

PASSED=0 FAILED=0 SKIPPED=0
run_suite() {  # name, configure args...
    name=$1; shift
    echo "== $name: configure $*"
    rm -rf "build/$name"
    mkdir -p "build/$name"
    rc=0
    (cd "build/$name" && ../../configure -q "$@" && make -j"$JOBS" >/dev/null &&
        make -j"$JOBS" check) || rc=$?
    # Check's own summary line of each test program, then the counts.
    for l in "build/$name"/tests/test-*.log; do
        [ -f "$l" ] && printf '%s: %s\n' "$(basename "$l" .log)" \
            "$(grep -E '^[0-9]+%: Checks:' "$l" | tail -1)"
    done
    if [ -f "build/$name/test-suite.log" ]; then
        p=$(sed -n 's/^# PASS: *//p' "build/$name/test-suite.log")
        f=$(sed -n 's/^# FAIL: *//p' "build/$name/test-suite.log")
        e=$(sed -n 's/^# ERROR: *//p' "build/$name/test-suite.log")
        k=$(sed -n 's/^# SKIP: *//p' "build/$name/test-suite.log")
        PASSED=$((PASSED + ${p:-0})) FAILED=$((FAILED + ${f:-0} + ${e:-0}))
        SKIPPED=$((SKIPPED + ${k:-0}))
    fi
    if [ "$rc" -ne 0 ]; then
        cat "build/$name"/tests/*.log >&2 || true
        echo "tests: $PASSED passed, $((FAILED > 0 ? FAILED : 1)) failed, $SKIPPED skipped"
        exit 1
    fi
}

run_suite plain CFLAGS="-O2 -g"
[ "$quick" = 1 ] && { echo "tests: $PASSED passed, $FAILED failed, $SKIPPED skipped"; exit 0; }

# The Debian packages: built from a copy of the tree (make check inside,
# without the GPU emulator test), lintian clean, and a program built and run
# against the unpacked .debs.  NVFP4_DEB=0 skips it.
if [ "${NVFP4_DEB:-1}" = 1 ]; then
    echo "== deb"
    "$ROOT/scripts/deb-check.sh" || { echo "tests: $PASSED passed, 1 failed, $SKIPPED skipped"; exit 1; }
fi

# A build that is compiled (and linked) but not tested: build/NAME
# configured with the arguments given; a failure ends the suite.
compile_only() {  # name, configure args...
    name=$1; shift
    rm -rf "build/$name"
    mkdir -p "build/$name"
    (cd "build/$name" && ../../configure -q "$@" >/dev/null && make -j"$JOBS" >/dev/null) ||
        { echo "tests: $PASSED passed, 1 failed, $SKIPPED skipped"; exit 1; }
}

# The GPU backends compile here although nothing can run them (no GPU):
# a break in either vendor's path shows up at once.
gpu_compile() {  # name, configure args...
    echo "== $1: configure $2 && make (compile only; no GPU here)"
    compile_only "$@"
    echo "compiled: build/$1/libkernels/gpu/.libs/nvfp4-backend-${1#gpu-}.so"
}
if [ "${NVFP4_GPU_COMPILE:-1}" = 1 ]; then
    "$ROOT/scripts/setup-deps.sh" --gpu
    if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
        gpu_compile gpu-cuda --enable-cuda
    else
        echo "== gpu-cuda: skipped (no nvcc)"
    fi
    gpu_compile gpu-hip --enable-hip
fi

# Unoptimized builds (a debugging user's CFLAGS="-O0 -g"), gcc and clang,
# compiled and linked, and their libraries' NEEDED entries and RUNPATHs
# checked (tests/needed.test): at -O0 a libm function the optimizer had
# expanded is a call (libformat, which does not link libm, once failed to
# link), an intrinsic's immediate must be a literal, not an unrolled loop's
# index, and clang links its OpenMP runtime's directory in as a RUNPATH
# unless told not to (configure's OPENMP_LDFLAGS).
for cc in gcc clang; do
    echo "== o0-$cc: configure CC=$cc CFLAGS=-O0 && make && tests/needed.test"
    compile_only "o0-$cc" CC="$cc" CFLAGS="-O0 -g"
    rc=0
    (cd "build/o0-$cc" && sh ../../tests/needed.test >needed.log 2>&1) || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        cat "build/o0-$cc/needed.log"
        echo "tests: $PASSED passed, 1 failed, $SKIPPED skipped"
        exit 1
    fi
    rm -rf "build/o0-$cc"
done

run_suite sanitize CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
    LDFLAGS="-fsanitize=address,undefined"

# The libFuzzer harnesses as a regression gate: each for 20 s from its
# committed seed corpus (a crash, leak, hang or blow-up fails the suite).
if [ "${NVFP4_FUZZ:-1}" = 1 ]; then
    echo "== fuzz: scripts/fuzz.sh 20"
    "$ROOT/scripts/fuzz.sh" 20 ||
        { echo "tests: $PASSED passed, 1 failed, $SKIPPED skipped"; exit 1; }
fi

# ThreadSanitizer: two threads, each with its own context, on one shared
# model (test-context's "threads" case), and the CPU backend's own thread
# pool (libkernels/cpu-pool.c) under test-kernels at 2 threads.  libgomp is
# not built with TSan, so its thread pool would be reported falsely: the
# contexts' case runs with OMP_NUM_THREADS=1 and models opened with
# threads = 1 (two contexts on one backend at once would take the pool's
# OpenMP fallback), which leaves the library's own threads as the only
# concurrency.
echo "== tsan: test-context threads (OMP_NUM_THREADS=1), test-kernels (2 threads)"
rm -rf build/tsan
mkdir -p build/tsan
(cd build/tsan && ../../configure -q CFLAGS="-O1 -g -fsanitize=thread" \
    LDFLAGS="-fsanitize=thread" >/dev/null &&
    make -j"$JOBS" libmodel/libnvfp4-model.la >/dev/null &&
    make -j"$JOBS" tests/test-context >/dev/null &&
    OMP_NUM_THREADS=1 CK_RUN_CASE=threads CK_FORK=no TSAN_OPTIONS="halt_on_error=1" \
        ./tests/test-context &&
    make -j"$JOBS" tests/test-kernels >/dev/null &&
    OMP_NUM_THREADS=2 CK_FORK=no TSAN_OPTIONS="halt_on_error=1" ./tests/test-kernels) ||
    { echo "tests: $PASSED passed, 1 failed, $SKIPPED skipped"; exit 1; }

if [ "${NVFP4_VALGRIND:-1}" = 1 ]; then
    # NVFP4_NO_JIT: valgrind cannot follow PCRE2's JIT code.  A test that
    # exits 77 (a GPU test without a GPU) is a skip.
    echo "== valgrind"
    (cd build/plain && for t in tests/test-*; do
        [ -x "$t" ] && [ "${t%.*}" = "$t" ] || continue
        rc=0
        NVFP4_NO_JIT=1 NVFP4_TEST_QUICK=1 CK_TIMEOUT_MULTIPLIER=20 ./libtool --mode=execute valgrind -q \
            --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite \
            "$t" > "$t.valgrind.log" 2>&1 || rc=$?
        case $rc in
        0) echo "valgrind clean: $t" ;;
        77) echo "valgrind skip: $t" ;;
        *) cat "$t.valgrind.log" >&2; echo "valgrind FAILED: $t (exit $rc)"; exit 1 ;;
        esac
    done) || { echo "tests: $PASSED passed, 1 failed, $SKIPPED skipped"; exit 1; }
fi

# distcheck proves the tarball builds, installs and passes its tests; the
# GPU emulator run (7 minutes) is the plain pass's, on the same sources, so
# it is not repeated there.
echo "== distcheck (gpu-emu.test skipped: the plain pass ran it)"
(cd build/plain && NVFP4_SKIP_GPU_EMU=1 make -j"$JOBS" distcheck >/dev/null 2>&1 ||
    { echo "distcheck failed; rerunning verbosely" >&2; NVFP4_SKIP_GPU_EMU=1 make distcheck; })
echo "== all tests passed (make check plain, under ASan+UBSan and under valgrind; fuzz regression; make distcheck)"
echo "tests: $PASSED passed, $FAILED failed, $SKIPPED skipped"
