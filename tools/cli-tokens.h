/* SPDX-License-Identifier: MIT */
#ifndef NVFP4_CLI_TOKENS_H
#define NVFP4_CLI_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"

/* Whole file, NUL-terminated, or NULL after printing the error. */
char *cli_read_file(const char *path, size_t *len);
/* "1,2,3" or "@FILE"; 0 or -1 after printing the error. */
int cli_parse_tokens(const char *spec, int32_t **ids, size_t *n);

#endif
