#!/bin/sh
# SPDX-License-Identifier: MIT
# Configure and build nvfp4 in build/release (after scripts/setup-deps.sh).
# Extra arguments go to configure (e.g. --enable-cuda).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ -x configure ] || autoreconf -fi
mkdir -p build/release
cd build/release
[ -f Makefile ] || ../../configure -q CFLAGS="-O3 -g" "$@"
make -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
echo "built: $ROOT/build/release/tools/nvfp4"
