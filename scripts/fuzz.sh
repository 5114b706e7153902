#!/bin/sh
# SPDX-License-Identifier: MIT
# Build the libFuzzer harnesses (clang, ASan + UBSan, libraries instrumented
# too) in build/fuzz and run each for SECONDS on its corpus.
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]   default: 60 s each, every harness
#
# Each harness starts from the committed seeds tests/fuzz/corpus/<harness>/
# and keeps what it finds in build/fuzz/corpus/<harness>/ (reused by the next
# run); crashes, leaks, timeouts (> 10 s per input) and out-of-memory inputs
# (> 2 GB) land in build/fuzz/artifacts/ and fail the script.  The last
# libFuzzer status line of each harness (execs, cov:, ft:) is printed.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${1:-60}
[ $# -gt 0 ] && shift
ALL="fuzz-safetensors fuzz-index fuzz-config fuzz-qconfig fuzz-tokenizer fuzz-model-config fuzz-model-header fuzz-template fuzz-request"
HARNESSES=${*:-$ALL}
JOBS=${JOBS:-2}
B="$ROOT/build/fuzz"

command -v clang >/dev/null 2>&1 || { echo "fuzz.sh: needs clang (scripts/setup-deps.sh)" >&2; exit 1; }
[ "$ROOT/configure" -nt "$ROOT/configure.ac" ] || (cd "$ROOT" && autoreconf -fi >/dev/null 2>&1)
mkdir -p "$B"
if [ ! -f "$B/Makefile" ] || ! grep -q "^FUZZ_CFLAGS = -fsanitize=fuzzer" "$B/Makefile"; then
    (cd "$B" && "$ROOT/configure" -q CC=clang --enable-fuzzing --disable-shared --enable-static \
        CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
        LDFLAGS="-fsanitize=address,undefined")
fi
targets=
for h in $HARNESSES; do targets="$targets tests/fuzz/$h"; done
(cd "$B" && make -j"$JOBS" $targets >/dev/null)

mkdir -p "$B/artifacts"
# Each input is written to a scratch file: memory-backed when possible, in
# a directory of this run, removed at the end.
base=${TMPDIR:-/tmp}
[ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
TMPDIR=$(mktemp -d "$base/nvfp4-fuzz.XXXXXX")
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
rc=0
for h in $HARNESSES; do
    mkdir -p "$B/corpus/$h"
    log="$B/$h.log"
    echo "== $h: $SECS s"
    # A harness links a static OpenMP runtime: one thread keeps it quick.
    OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$B/tests/fuzz/$h" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=2048 -print_final_stats=1 -dict="$ROOT/tests/fuzz/nvfp4.dict" \
        -artifact_prefix="$B/artifacts/$h-" \
        "$B/corpus/$h" "$ROOT/tests/fuzz/corpus/$h" > "$log" 2>&1 || {
        rc=1
        grep -E "ERROR|SUMMARY|artifact|Test unit written" "$log" | head -20 >&2
        echo "== $h: FAILED (log: $log)" >&2
    }
    grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "$log" | tail -1 || true
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" || true
done
exit $rc
