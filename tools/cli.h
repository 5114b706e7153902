/* SPDX-License-Identifier: MIT */
/* Shared pieces of the nvfp4 command-line tool; each subcommand is a file. */
#ifndef NVFP4_CLI_H
#define NVFP4_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <nvfp4/format.h>

/* Exit statuses of every subcommand. */
enum { CLI_OK = 0, CLI_INVALID = 1, CLI_USAGE = 2 };

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);  /* argv[0] is the subcommand */
    void (*help)(FILE *out);
} cli_command;

/* Print "nvfp4: message" on stderr; returns CLI_INVALID. */
/* This process's rank under mpirun (nvfp4_comm_world()); only rank 0 prints
 * and writes output files. */
extern int cli_rank, cli_ranks;

int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print an nvfp4_error; returns CLI_INVALID. */
int cli_fail_error(const nvfp4_error *err);
/* Report wrong usage of COMMAND; returns CLI_USAGE. */
int cli_usage(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Parse ARG as a decimal integer in [LO, HI] for option OPT (its name as
 * the user spells it, e.g. "--threads"): NULL when it is one (*OUT set),
 * else a message naming OPT, the range and ARG (a static buffer, valid until
 * the next call): overflow, trailing text and an empty ARG included. */
const char *cli_int_arg(const char *opt, const char *arg, long lo, long hi, long *out);

/* splitmix64 step: the I-th value of the sequence seeded with S is
 * cli_splitmix64(S + I * 0x9e3779b97f4a7c15) (synth's weights, bench's ids). */
static inline uint64_t cli_splitmix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

extern const cli_command cli_inspect;
extern const cli_command cli_dequant;
extern const cli_command cli_generate;
extern const cli_command cli_ppl;
extern const cli_command cli_logits;
extern const cli_command cli_tokenize;
extern const cli_command cli_synth;
extern const cli_command cli_bench;
extern const cli_command cli_serve;
extern const cli_command cli_template;
#endif
