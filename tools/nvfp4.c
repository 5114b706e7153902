/* SPDX-License-Identifier: MIT */
/* nvfp4: command-line front end.  Dispatches to one file per subcommand. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvfp4/kernels.h>

#include "cli.h"

static const cli_command *const commands[] = {
    &cli_inspect,
    &cli_dequant,
    &cli_generate,
    &cli_ppl,
    &cli_logits,
    &cli_tokenize,
    &cli_template,
    &cli_bench,
    &cli_synth,
#ifdef HAVE_MHD
    &cli_serve,
#endif
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

int cli_rank = 0, cli_ranks = 1;

int cli_fail(const char *fmt, ...)
{
    va_list ap;

    if (cli_ranks > 1)
        fprintf(stderr, "nvfp4 (rank %d of %d): ", cli_rank, cli_ranks);
    else
        fputs("nvfp4: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_INVALID;
}

int cli_fail_error(const nvfp4_error *err)
{
    return cli_fail("%s", err->text[0] ? err->text : nvfp4_strerror(err->status));
}

int cli_usage(const cli_command *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "nvfp4 %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'nvfp4 %s --help'.\n", cmd->name);
    return CLI_USAGE;
}

const char *cli_int_arg(const char *opt, const char *arg, long lo, long hi, long *out)
{
    static char msg[256];
    char *end;
    long v;

    errno = 0;
    v = strtol(arg, &end, 10);
    if (end != arg && !*end && !errno && v >= lo && v <= hi) {
        *out = v;
        return NULL;
    }
    snprintf(msg, sizeof(msg), "%s: expected an integer from %ld to %ld, got '%.64s'", opt, lo,
             hi, arg);
    return msg;
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 COMMAND [OPTIONS] ...\n"
            "Load and run NVFP4 checkpoints exported by AMD Quark, NVIDIA ModelOpt or\n"
            "llm-compressor (compressed-tensors).\n\n"
            "Commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(out,
#ifndef HAVE_MHD
            "  (serve: not built; configure did not find libmicrohttpd)\n"
#endif
            "\nOptions:\n"
            "  -h, --help     show this help and exit\n"
            "  -V, --version  show the version and exit\n\n"
            "'nvfp4 COMMAND --help' describes one command.\n"
            "Exit status: 0 success, 1 invalid input, 2 wrong usage.\n");
}

/* Under mpirun every rank runs the command on its part of the model
 * (libmodel/parallel.c); rank 0 alone prints.  A rank that fails ends the
 * job (MPI_Abort: the launcher stops the others, which may be waiting for
 * it in a collective, and names the rank). */
static int run_command(const cli_command *cmd, int argc, char **argv)
{
    nvfp4_error err;
    nvfp4_comm *w = nvfp4_comm_world(&err);
    int rc;

    if (!w)
        return cli_fail_error(&err);
    cli_rank = nvfp4_comm_rank(w);
    cli_ranks = nvfp4_comm_size(w);
    if (cli_rank != 0 && !freopen("/dev/null", "w", stdout))
        return cli_fail("rank %d: cannot redirect its output to /dev/null", cli_rank);
    if (cli_ranks > 1 && !strcmp(cmd->name, "serve"))
        return cli_fail("serve does not run split over %d ranks (one server, one "
                        "scheduler); run it without mpirun", cli_ranks);
    /* the commands that do not run a model: rank 0 alone (one writer) */
    if (cli_ranks > 1 && cli_rank != 0 && strcmp(cmd->name, "generate") &&
        strcmp(cmd->name, "ppl") && strcmp(cmd->name, "logits") && strcmp(cmd->name, "bench"))
        return CLI_OK;
    rc = cmd->run(argc, argv);
    if (rc != CLI_OK && cli_ranks > 1) {
        fprintf(stderr, "nvfp4: rank %d of %d failed (exit status %d); ending the job\n",
                cli_rank, cli_ranks, rc);
        fflush(NULL);
        nvfp4_comm_abort(w, rc);
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")) {
        printf("nvfp4 %s\n", PACKAGE_VERSION);
        return CLI_OK;
    }
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(argv[1], commands[i]->name) != 0)
            continue;
        for (int a = 2; a < argc; a++) {
            if (!strcmp(argv[a], "--"))
                break;
            if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
                commands[i]->help(stdout);
                return CLI_OK;
            }
        }
        return run_command(commands[i], argc - 1, argv + 1);
    }
    fprintf(stderr, "nvfp4: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}
