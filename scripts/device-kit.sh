#!/bin/sh
# SPDX-License-Identifier: MIT
# Pack what scripts/gpu-check.sh needs on a GPU machine that reaches no
# package registry (this workplace's lent H200s: CUDA toolkit and gcc there,
# no autotools, jansson, PCRE2 or Check):
#
#   .devkit/nvfp4-VERSION.tar.gz   `make dist` of the working tree (configure
#                                  included: no autotools needed there)
#   .devkit/debs/*.deb             Debian's jansson, PCRE2, Check (+ subunit),
#                                  pkgconf and make, unpacked there into a
#                                  private prefix, never installed
#
#   scripts/device-kit.sh                  (here, with apt and the build deps)
#   scripts/gpu-check.sh --kit .devkit     (there; name .devkit in carry)
#
# .devkit/ is ignored by git; it is about 8 MB.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KIT=$ROOT/.devkit
B=$ROOT/build/devkit
PKGS="libjansson4 libjansson-dev libpcre2-8-0 libpcre2-dev check libsubunit0 libsubunit-dev \
pkgconf pkgconf-bin libpkgconf3 make"

rm -rf "$KIT"
mkdir -p "$KIT/debs" "$B"
(cd "$KIT/debs" && apt-get download $PKGS >/dev/null 2>&1) || {
    echo "device-kit: apt-get download $PKGS failed" >&2
    exit 1
}
[ -x "$ROOT/configure" ] || (cd "$ROOT" && autoreconf -fi >/dev/null)
cd "$B"
[ -f Makefile ] || "$ROOT/configure" -q
make -s dist >/dev/null
mv nvfp4-*.tar.gz "$KIT/"
du -sh "$KIT"
ls "$KIT" "$KIT/debs"
