#!/bin/sh
# SPDX-License-Identifier: MIT
# The Debian packages from the working tree, checked:
#   1. a copy of the tree in build/deb/nvfp4-VERSION (dpkg-buildpackage writes
#      its .debs into the parent directory), dpkg-buildpackage -us -uc -b
#      (dh_auto_test runs make check, see debian/rules);
#   2. lintian on the .changes: no error, no warning (overrides only in
#      debian/*.lintian-overrides, each with its reason);
#   3. the .debs unpacked with dpkg-deb -x into a throwaway root, a program
#      built there with pkg-config alone (PKG_CONFIG_LIBDIR and
#      PKG_CONFIG_SYSROOT_DIR into the root) and run with LD_LIBRARY_PATH,
#      and the packaged nvfp4 command run on a fixture model.
# Output: build/deb/lintian.txt, build/deb/*.deb.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
for t in dpkg-buildpackage lintian dpkg-deb fakeroot pkg-config; do
    command -v $t >/dev/null 2>&1 || { echo "deb-check: needs $t (scripts/setup-deps.sh)" >&2; exit 1; }
done
T0=$(date +%s)
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=${version%-*}
B=$ROOT/build/deb
rm -rf "$B"
mkdir -p "$B/nvfp4-$upstream"
# tracked and untracked-but-not-ignored files: the tree as it would be committed
git ls-files -co --exclude-standard -z | (cd "$ROOT" && xargs -0 cp --parents -t "$B/nvfp4-$upstream")
echo "== deb: dpkg-buildpackage -us -uc -b (log: build/deb/build.log)"
(cd "$B/nvfp4-$upstream" && dpkg-buildpackage -us -uc -b > "$B/build.log" 2>&1) || {
    tail -n 80 "$B/build.log" >&2
    echo "deb-check: dpkg-buildpackage failed" >&2
    exit 1
}
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR):' "$B/build.log" || true
ls "$B"/*.deb | sed 's|.*/|built: |'

echo "== deb: lintian"
changes=$(ls "$B"/nvfp4_*.changes)
lintian --display-info --pedantic --show-overrides "$changes" > "$B/lintian.txt" 2>&1 || true
cat "$B/lintian.txt"
if grep -E '^[EW]: ' "$B/lintian.txt" >/dev/null; then
    echo "deb-check: lintian reports errors or warnings (above)" >&2
    exit 1
fi

echo "== deb: build and run against the unpacked packages"
R=$B/root
mkdir -p "$R"
for d in "$B"/*.deb; do dpkg-deb -x "$d" "$R"; done
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=$R/usr/lib/$multiarch
PKG_CONFIG_SYSROOT_DIR=$R \
PKG_CONFIG_LIBDIR=$libdir/pkgconfig:/usr/lib/$multiarch/pkgconfig:/usr/share/pkgconfig \
    pkg-config --cflags --libs nvfp4-model > "$B/pc.txt"
echo "pkg-config: $(cat "$B/pc.txt")"
cc -o "$B/consumer-model" tests/consumer-model.c $(cat "$B/pc.txt")
LD_LIBRARY_PATH=$libdir "$B/consumer-model" tests/data/models/tiny
LD_LIBRARY_PATH=$libdir ldd "$B/consumer-model" | grep libnvfp4 | grep -q "$R" || {
    echo "deb-check: the program did not load the packaged libraries" >&2; exit 1; }
LD_LIBRARY_PATH=$libdir "$R/usr/bin/nvfp4" --version
LD_LIBRARY_PATH=$libdir "$R/usr/bin/nvfp4" ppl tests/data/models/tiny --tokens 1,2,3,4,5,6,7,8 --ctx 4
echo "== deb: passed in $(($(date +%s) - T0)) s"
