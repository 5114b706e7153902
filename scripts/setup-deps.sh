#!/bin/sh
# SPDX-License-Identifier: MIT
# Install what nvfp4 needs on a fresh Debian machine (run as root, or with sudo
# available).  Idempotent.
#
#   scripts/setup-deps.sh            build and test dependencies (C, and the
#                                    openai client's venv build/venv-serve)
#   scripts/setup-deps.sh --python   also the pinned Python venv in build/venv
#                                    (reference models, fixtures, baselines)
#   scripts/setup-deps.sh --gpu      also the GPU toolchains' extra packages
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
want_python=0
want_gpu=0
for a in "$@"; do
    case "$a" in
    --python) want_python=1 ;;
    --gpu) want_gpu=1 ;;
    *) echo "setup-deps.sh: unknown option $a" >&2; exit 2 ;;
    esac
done

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo

# Build: autotools, libtool, pkg-config, gcc (OpenMP).  Libraries: jansson
# (JSON), PCRE2 (tokenizer pre-tokenizer regex), ICU (NFC normalization of
# tokenizers that ask for it), libmicrohttpd (nvfp4 serve), Check (tests).  OpenBLAS only
# for the benchmark baseline.  valgrind for the memory check of the test suite.
# clang and its runtime libraries (libFuzzer, sanitizers) for scripts/fuzz.sh;
# debhelper, dpkg-dev, fakeroot and lintian for the Debian packages
# (scripts/deb-check.sh).
PKGS="build-essential autoconf automake libtool pkg-config \
libjansson-dev libpcre2-dev libicu-dev libmicrohttpd-dev check libopenblas-dev valgrind python3 python3-venv \
clang libclang-rt-14-dev debhelper dpkg-dev fakeroot lintian"
# Documentation checks of make check: groff (tests/man.test renders the
# manual page with warnings on) and doxygen (tests/doxygen.test, make html).
PKGS="$PKGS groff-base doxygen"
# Open MPI: the MPI communicator (configure --with-mpi, auto) and the split
# runs of tests/mpi.test (mpirun).
PKGS="$PKGS libopenmpi-dev openmpi-bin"

missing=
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup-deps: installing$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# The openai client for nvfp4 serve's tests (small; build/venv-serve).
"$ROOT/scripts/setup-serve-venv.sh" ||
    echo "setup-deps: no build/venv-serve (tests/serve/serve-openai.test will SKIP)" >&2

if [ "$want_gpu" = 1 ] && [ -x "$ROOT/scripts/setup-gpu-deps.sh" ]; then
    "$ROOT/scripts/setup-gpu-deps.sh"
fi

if [ "$want_python" = 1 ]; then
    "$ROOT/scripts/fixtures/setup-venv.sh"
fi
echo "setup-deps: done"
