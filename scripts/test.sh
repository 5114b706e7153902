#!/bin/sh
# The whole test suite from a clean clone on a fresh Debian machine:
# install dependencies, build, run `make check`, `make distcheck`, and the
# suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   scripts/test.sh            everything above
#   scripts/test.sh --quick    one plain build and make check
#   NVFP4_VALGRIND=1 scripts/test.sh   also run the suite under valgrind
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
quick=0
[ "${1:-}" = "--quick" ] && quick=1
JOBS=$(nproc 2>/dev/null || echo 2)

"$ROOT/scripts/setup-deps.sh"

echo "== autoreconf"
autoreconf -fi >/dev/null 2>&1 || autoreconf -fi

run_suite() {  # name, configure args...
    name=$1; shift
    echo "== $name: configure $*"
    rm -rf "build/$name"
    mkdir -p "build/$name"
    (cd "build/$name" && ../../configure -q "$@" && make -j"$JOBS" >/dev/null &&
        { make -j"$JOBS" check || { cat tests/*.log >&2; exit 1; }; })
}

run_suite plain CFLAGS="-O2 -g"
[ "$quick" = 1 ] && { echo "== all tests passed (quick)"; exit 0; }

run_suite sanitize CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
    LDFLAGS="-fsanitize=address,undefined"

if [ "${NVFP4_VALGRIND:-0}" = 1 ]; then
    echo "== valgrind"
    (cd build/plain && for t in tests/test-*; do
        [ -x "$t" ] && [ "${t%.*}" = "$t" ] || continue
        CK_FORK=no ./libtool --mode=execute valgrind -q --error-exitcode=9 \
            --leak-check=full --errors-for-leak-kinds=definite "$t" || exit 1
    done)
fi

echo "== distcheck"
(cd build/plain && make -j"$JOBS" distcheck >/dev/null 2>&1 ||
    { echo "distcheck failed; rerunning verbosely" >&2; make distcheck; })
echo "== all tests passed"
