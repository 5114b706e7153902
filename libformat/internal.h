/* SPDX-License-Identifier: MIT */
/* Helpers shared by the files of libformat; not exported. */
#ifndef NVFP4_FORMAT_INTERNAL_H
#define NVFP4_FORMAT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <nvfp4/format.h>

/* a * b with overflow detection: 0 on success. */
static inline int mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

/* madvise(MADV_DONTNEED) the whole pages of [p, p+n) when they lie in ST's
 * mapping; 0, or -1 when they do not. */
int nvfp4f_safetensors_release(const nvfp4_safetensors *st, const void *p, size_t n);
/* Read a whole small file into a NUL-terminated buffer. */
char *nvfp4f_read_file(const char *path, size_t limit, size_t *len, nvfp4_error *err);
/* Join a directory and a file name. */
/* "a directory", "a FIFO", ... for a stat mode that is not a regular file. */
const char *nvfp4f_file_kind(unsigned mode);

char *nvfp4f_path_join(const char *dir, const char *name);
/* Directory part of a path ("." when there is none). */
char *nvfp4f_dirname(const char *path);

#endif
