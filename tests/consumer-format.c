/* SPDX-License-Identifier: MIT */
/* Built against the installed libnvfp4-format with only
 * `pkg-config --cflags --libs nvfp4-format`: the format layer stands alone. */
#include <stdio.h>

#include <nvfp4/format.h>

int main(int argc, char **argv)
{
    nvfp4_error err;
    nvfp4_safetensors *st;

    if (argc != 2)
        return 2;
    st = nvfp4_safetensors_open(argv[1], &err);
    if (!st) {
        fprintf(stderr, "consumer: %s\n", err.text);
        return 1;
    }
    printf("consumer: %s holds %zu tensors (libnvfp4-format %s)\n", argv[1],
           nvfp4_safetensors_count(st), nvfp4_format_version());
    nvfp4_safetensors_free(st);
    return 0;
}
