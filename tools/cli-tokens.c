/* SPDX-License-Identifier: MIT */
/* Token id lists on the command line: "1,2,3" or "@FILE" (ids separated by
 * commas or white space). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-tokens.h"

char *cli_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 1 << 16, n = 0, r;
    char *buf;

    if (!f) {
        cli_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    if (!buf || ferror(f)) {
        fclose(f);
        free(buf);
        cli_fail("%s: cannot read", path);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

int cli_parse_tokens(const char *spec, int32_t **ids, size_t *n)
{
    char *text = NULL;
    const char *p, *what = spec;
    size_t cap = 64;

    *n = 0;
    if (spec[0] == '@') {
        text = cli_read_file(spec + 1, NULL);
        if (!text)
            return -1;
        p = text;
        what = spec + 1;
    } else {
        p = spec;
    }
    *ids = malloc(cap * sizeof(int32_t));
    if (!*ids) {
        free(text);
        return cli_fail("out of memory"), -1;
    }
    for (;;) {
        char *end;
        long v;
        while (*p && (isspace((unsigned char)*p) || *p == ','))
            p++;
        if (!*p)
            break;
        errno = 0;
        v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            cli_fail("%s: expected non-negative token ids separated by commas, found "
                     "'%.20s'", what, p);
            free(text);
            free(*ids);
            *ids = NULL;
            return -1;
        }
        if (*n == cap) {
            int32_t *ni = realloc(*ids, (cap *= 2) * sizeof(int32_t));
            if (!ni) {
                free(text);
                free(*ids);
                *ids = NULL;
                return cli_fail("out of memory"), -1;
            }
            *ids = ni;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    free(text);
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return cli_fail("%s: no token ids", what), -1;
    }
    return 0;
}
