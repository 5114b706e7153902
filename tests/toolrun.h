/* SPDX-License-Identifier: MIT */
/* Run the built `nvfp4` command from a Check test: its output and exit
 * status, failing the test when it dies from a signal. */
#ifndef NVFP4_TOOLRUN_H
#define NVFP4_TOOLRUN_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

/* stdout (and stderr when MERGE_STDERR) into *out (malloc'ed, caller frees);
 * returns the exit status. */
static inline int trun_tool(const char *args, int merge_stderr, char **out)
{
    char cmd[4096];
    size_t cap = 1 << 16, n = 0;
    FILE *p;
    int st;

    snprintf(cmd, sizeof(cmd), "%s %s %s", NVFP4_TOOL, args,
             merge_stderr ? "2>&1" : "2>/dev/null");
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    *out = malloc(cap);
    ck_assert_ptr_nonnull(*out);
    for (;;) {
        size_t r = fread(*out + n, 1, cap - n - 1, p);
        n += r;
        if (r == 0)
            break;
        if (n + 1 >= cap) {
            *out = realloc(*out, cap *= 2);
            ck_assert_ptr_nonnull(*out);
        }
    }
    (*out)[n] = '\0';
    st = pclose(p);
    ck_assert_msg(WIFEXITED(st), "%s died from a signal", cmd);
    return WEXITSTATUS(st);
}

/* Exit status only. */
static inline int trun_status(const char *args)
{
    char *out;
    int rc = trun_tool(args, 1, &out);
    free(out);
    return rc;
}

#endif
