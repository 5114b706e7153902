#!/bin/sh
# SPDX-License-Identifier: MIT
# api-names.sh HEADER: the names of the functions HEADER declares with
# NVFP4_API, one per line, sorted.  Comments and preprocessor lines are
# dropped first, then the text is cut into declarations at ';', '{' and '}',
# so a declaration may span any number of lines; the name is the last
# identifier before the first '(' after NVFP4_API.  A declaration the parser
# cannot read (no '(' or no identifier) is printed as "?..." so that the
# caller's comparison fails on it instead of skipping it.
# Used by tests/exports.test and tests/archive-symbols.test.
set -eu
[ $# -eq 1 ] || { echo "usage: api-names.sh HEADER" >&2; exit 2; }
[ -r "$1" ] || { echo "api-names.sh: cannot read $1" >&2; exit 2; }
awk '
    cont { cont = /\\$/; next }
    /^[ \t]*#/ { cont = /\\$/; next }
    { buf = buf " " $0 }
    END {
        # comments: /* ... */ (across lines, now joined) and // ...
        out = ""
        while ((i = index(buf, "/*")) > 0) {
            rest = substr(buf, i + 2)
            j = index(rest, "*/")
            if (j == 0) { buf = substr(buf, 1, i - 1); break }
            out = out substr(buf, 1, i - 1) " "
            buf = substr(rest, j + 2)
        }
        buf = out buf
        gsub(/\/\/[^\n]*/, "", buf)
        n = split(buf, decl, /[;{}]/)
        for (k = 1; k <= n; k++) {
            d = decl[k]
            if (d !~ /(^|[^A-Za-z0-9_])NVFP4_API([^A-Za-z0-9_]|$)/)
                continue
            sub(/^.*NVFP4_API/, "", d)
            p = index(d, "(")
            if (p == 0) { gsub(/[ \t]+/, " ", d); print "?" d; continue }
            d = substr(d, 1, p - 1)
            if (match(d, /[A-Za-z_][A-Za-z0-9_]*[ \t]*$/) == 0) {
                gsub(/[ \t]+/, " ", d); print "?" d; continue
            }
            name = substr(d, RSTART, RLENGTH)
            sub(/[ \t]+$/, "", name)
            print name
        }
    }
' "$1" | LC_ALL=C sort
