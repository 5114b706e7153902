/* SPDX-License-Identifier: MIT */
/* libFuzzer: tokenizer.json through nvfp4_tokenizer_load, then encode and
 * decode.  The input is the JSON, optionally followed by a NUL byte and a
 * text to encode besides the fixed ones (so the fuzzer mutates both). */
#include "config.h"

#include <nvfp4/model.h>

#include "fuzzutil.h"

static const char *const texts[] = {
    "Hello, world! 123 4567", "  leading and trailing  ", "\xc3\xa9t\xc3\xa9 \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x98\x80",
    "<|endoftext|>a<|im_start|>b", "don't I'm we'll\n\n\tx",
    "\xe2\x96\x81x  \xe2\x96\x81\xe2\x96\x81<s>y</s> <0x41><unk>\xf4\x8f\xbf\xbf", "", NULL};

static void run(const nvfp4_tokenizer *tok, const char *text, size_t n)
{
    nvfp4_error err;
    int32_t *ids = NULL;
    size_t nids = 0;

    if (nvfp4_tokenizer_encode(tok, text, n, &ids, &nids, &err) == NVFP4_OK) {
        char *s = nvfp4_tokenizer_decode(tok, ids, nids, 0, &err);
        char *t = nvfp4_tokenizer_decode(tok, ids, nids, 1, &err);
        for (size_t i = 0; i < nids; i++) {
            size_t len;
            (void)nvfp4_tokenizer_token_bytes(tok, ids[i], &len);
            (void)nvfp4_tokenizer_is_special(tok, ids[i]);
        }
        free(s);
        free(t);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t jn = nul ? (size_t)(nul - data) : size;
    nvfp4_error err;
    nvfp4_tokenizer *tok = nvfp4_tokenizer_load(fz_write("tokenizer.json", data, jn), &err);

    if (!tok)
        return 0;
    for (const char *const *t = texts; *t; t++)
        run(tok, *t, strlen(*t));
    if (nul)
        run(tok, (const char *)nul + 1, size - jn - 1);
    (void)nvfp4_tokenizer_token_id(tok, "<|endoftext|>");
    nvfp4_tokenizer_free(tok);
    return 0;
}
