/* SPDX-License-Identifier: MIT */
/* libFuzzer: nvfp4_model_open of the tiny fixture (its config.json) whose
 * model.safetensors has a fuzzed header in front of the fixture's real data
 * region: the input is the header JSON; its 8-byte length is prepended.
 * A forward pass of two tokens runs when it opens. */
#include "config.h"

#include <nvfp4/model.h>

#include "fuzzutil.h"

static unsigned char *payload;
static size_t npayload;

/* The fixture's bytes after its header. */
static void load_payload(void)
{
    size_t n;
    unsigned char *b;
    uint64_t h = 0;

    if (payload)
        return;
    b = fz_slurp(FZ_TINY "model.safetensors", &n);
    for (int i = 0; i < 8; i++)
        h |= (uint64_t)b[i] << (8 * i);
    if (n < 8 || h > n - 8)
        abort();
    npayload = n - 8 - (size_t)h;
    payload = malloc(npayload + 1);
    if (!payload)
        abort();
    memcpy(payload, b + 8 + h, npayload);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char len[8];

    load_payload();
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)size >> (8 * i));
    fz_tiny_link("config.json");
    fz_write3("model.safetensors", len, 8, data, size, payload, npayload);
    fz_open_and_forward();
    return 0;
}
