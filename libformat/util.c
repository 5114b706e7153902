/* SPDX-License-Identifier: MIT */
/* Small file and path helpers shared inside libformat. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

const char *nvfp4f_file_kind(unsigned mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

char *nvfp4f_read_file(const char *path, size_t limit, size_t *len, nvfp4_error *err)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *f;
    struct stat sb = {0};
    char *buf;
    size_t n;

    if (fd < 0) {
        nvfp4_error_set(err, errno == ENOENT ? NVFP4_ERR_NOT_FOUND : NVFP4_ERR_IO,
                        path, NULL, -1, "cannot open: %s", strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        nvfp4_error_set(err, NVFP4_ERR_IO, path, NULL, -1, "is %s, not a regular file",
                        nvfp4f_file_kind(sb.st_mode));
        return NULL;
    }
    if (!(f = fdopen(fd, "rb"))) {
        close(fd);
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, NULL, -1, "out of memory opening");
        return NULL;
    }
    if ((uint64_t)sb.st_size > limit) {
        fclose(f);
        nvfp4_error_set(err, NVFP4_ERR_INVALID, path, NULL, -1,
                        "file of %lld bytes exceeds the limit of %zu",
                        (long long)sb.st_size, limit);
        return NULL;
    }
    buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        fclose(f);
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, NULL, -1,
                        "out of memory reading %lld bytes", (long long)sb.st_size);
        return NULL;
    }
    n = fread(buf, 1, (size_t)sb.st_size, f);
    if (ferror(f)) {
        fclose(f);
        free(buf);
        nvfp4_error_set(err, NVFP4_ERR_IO, path, NULL, -1, "read error");
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

char *nvfp4f_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *s = malloc(a + b + 2);

    if (!s)
        return NULL;
    memcpy(s, dir, a);
    s[a] = '/';
    memcpy(s + a + 1, name, b + 1);
    return s;
}

char *nvfp4f_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');

    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}
