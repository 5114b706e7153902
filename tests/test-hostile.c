/* SPDX-License-Identifier: MIT */
/*
 * The hostile-checkpoint corpus (scripts/fixtures/gen_hostile.py, generated
 * here into the build tree from the committed fixtures): every case must end
 * with its exit status (never a signal), print its message, and do so in
 * bounded time and memory.  Each case is a fork+exec of tools/nvfp4, reaped
 * with wait4 for its own peak RSS.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Bounds per case: milliseconds to a second of CPU time is what these take;
 * the seconds are for sanitizers (NVFP4_NO_JIT, set under valgrind, makes
 * the regex case run PCRE2's interpreter: four times more).  The work bound
 * is CPU time (user + system, from wait4), so that a loaded machine does
 * not fail it; wall time only catches a process that blocks. */
#define CPU_LIMIT_S 5.0
#define WALL_LIMIT_S 30.0
#define RSS_LIMIT_KB (200 * 1024)
#define KILL_AFTER_S 60
/* Built with AddressSanitizer (so is the tool): its shadow memory and
 * redzones triple time and memory. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZER_SCALE 3
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZER_SCALE 3
#endif
#endif
#ifndef SANITIZER_SCALE
#define SANITIZER_SCALE 1
#endif

static json_t *manifest;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Run ARGV with stderr into ERRPATH; *status, *wall, *rss_kb. */
static void run_case(char **argv, const char *errpath, int *status, double *wall,
                     double *cpu, long *rss_kb)
{
    struct rusage ru;
    double t0 = now_s();
    pid_t pid = fork(), w;

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_RDWR);
        if (fd < 0 || nul < 0)
            _exit(126);
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    for (;;) {
        w = wait4(pid, status, WNOHANG, &ru);
        if (w == pid)
            break;
        ck_assert_int_eq(w, 0);
        if (now_s() - t0 > KILL_AFTER_S) {
            kill(pid, SIGKILL);
            w = wait4(pid, status, 0, &ru);
            break;
        }
        usleep(2000);
    }
    *wall = now_s() - t0;
    *cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    *rss_kb = ru.ru_maxrss;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = calloc(1, 65536);
    size_t n;

    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(buf);
    n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* "{dir}" and "{out}" in A replaced; malloc'ed. */
static char *subst(const char *a, const char *dir, const char *out)
{
    char *r = malloc(strlen(a) + strlen(dir) * 4 + strlen(out) * 4 + 1), *p = r;

    ck_assert_ptr_nonnull(r);
    while (*a) {
        if (!strncmp(a, "{dir}", 5)) {
            p = stpcpy(p, dir);
            a += 5;
        } else if (!strncmp(a, "{out}", 5)) {
            p = stpcpy(p, out);
            a += 5;
        } else {
            *p++ = *a++;
        }
    }
    *p = '\0';
    return r;
}

START_TEST(hostile_case)
{
    json_t *c = json_array_get(manifest, (size_t)_i);
    const char *name = json_string_value(json_object_get(c, "case"));
    const char *want = json_string_value(json_object_get(c, "message"));
    int want_exit = (int)json_integer_value(json_object_get(c, "exit"));
    json_t *args = json_object_get(c, "args");
    size_t na = json_array_size(args);
    char **argv = calloc(na + 2, sizeof(char *));
    char dir[1024], out[1024], errp[1100];
    double wall, cpu, limit = CPU_LIMIT_S * SANITIZER_SCALE;
    int status;
    long rss;
    char *msg;

    ck_assert_ptr_nonnull(name);
    ck_assert_ptr_nonnull(argv);
    if (getenv("NVFP4_NO_JIT"))
        limit *= 4;
    snprintf(dir, sizeof(dir), "%s/%s", HOSTILE_DIR, name);
    snprintf(out, sizeof(out), "%s/%s.out", HOSTILE_DIR, name);
    snprintf(errp, sizeof(errp), "%s/%s.stderr", HOSTILE_DIR, name);
    argv[0] = strdup(NVFP4_TOOL);
    for (size_t i = 0; i < na; i++)
        argv[i + 1] = subst(json_string_value(json_array_get(args, i)), dir, out);
    run_case(argv, errp, &status, &wall, &cpu, &rss);
    msg = slurp(errp);
    fprintf(stderr, "%-28s exit %d  %6.3f s CPU  %6.3f s wall  %7ld kB\n", name,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1, cpu, wall, rss);
    ck_assert_msg(WIFEXITED(status), "%s: killed by signal %d after %.1f s", name,
                  WIFSIGNALED(status) ? WTERMSIG(status) : -1, wall);
    ck_assert_msg(WEXITSTATUS(status) == want_exit, "%s: exit %d, expected %d; stderr: %s",
                  name, WEXITSTATUS(status), want_exit, msg);
    ck_assert_msg(strstr(msg, want), "%s: stderr lacks \"%s\": %s", name, want, msg);
    ck_assert_msg(cpu < limit, "%s: took %.2f s of CPU (limit %.1f)", name, cpu, limit);
    ck_assert_msg(wall < WALL_LIMIT_S, "%s: took %.2f s (limit %.1f)", name, wall,
                  WALL_LIMIT_S);
    ck_assert_msg(rss < RSS_LIMIT_KB * SANITIZER_SCALE, "%s: peak RSS %ld kB (limit %d)", name,
                  rss, RSS_LIMIT_KB * SANITIZER_SCALE);
    for (size_t i = 0; i <= na; i++)
        free(argv[i]);
    free(argv);
    free(msg);
}
END_TEST

/* The corpus is regenerated by every run: a stale copy never hides a change
 * of the script. */
static int generate(void)
{
    char cmd[4096];

    snprintf(cmd, sizeof(cmd), "python3 '%s' '%s' '%s'", GEN_HOSTILE, TEST_DATA_DIR,
             HOSTILE_DIR);
    return system(cmd);
}

int main(void)
{
    char path[1100];
    json_error_t jerr;
    Suite *s;
    SRunner *r;
    TCase *tc;
    int failed, rc;

    if (system("python3 -c '' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "SKIP: no python3 to generate the hostile corpus\n");
        return 77;
    }
    rc = generate();
    if (rc != 0) {
        fprintf(stderr, "gen_hostile.py failed (%d)\n", rc);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/manifest.json", HOSTILE_DIR);
    manifest = json_load_file(path, 0, &jerr);
    if (!json_is_array(manifest) || json_array_size(manifest) == 0) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return 1;
    }
    s = suite_create("hostile");
    tc = tcase_create("corpus");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, hostile_case, 0, (int)json_array_size(manifest));
    suite_add_tcase(s, tc);
    r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    failed = srunner_ntests_failed(r);
    srunner_free(r);
    json_decref(manifest);
    return failed ? 1 : 0;
}
