/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness of the chat-template renderer: the input is a template
 * (up to the first NUL) and, after the NUL, an optional JSON message list;
 * it is parsed and rendered under small bounds so that every input finishes
 * quickly.  Errors are expected; crashes, hangs, leaks and sanitizer reports
 * are the findings.  Seeds: tests/fuzz/corpus/fuzz-template/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nvfp4/model.h>

static const char default_messages[] =
    "[{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi <b>&\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>x</think>Hello\","
    "  \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"part\"}]}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t len = nul ? (size_t)(nul - data) : size;
    char *msgs = NULL, *out;
    nvfp4_chat_options opt;
    nvfp4_chat_template *t;
    nvfp4_error err;

    t = nvfp4_chat_template_parse(src, len, "fuzz", &err);
    if (!t)
        return 0;
    if (nul && (size_t)(nul - data) + 1 < size) {
        size_t n = size - len - 1;
        if ((msgs = malloc(n + 1))) {
            memcpy(msgs, nul + 1, n);
            msgs[n] = 0;
        }
    }
    nvfp4_chat_options_init(&opt);
    opt.now = 0;
    opt.max_output = 1 << 20;
    opt.max_iterations = 100000;
    opt.max_memory = 64 << 20;
    opt.max_depth = 32;
    out = nvfp4_chat_template_render(t, msgs ? msgs : default_messages,
                                     "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
                                     " \"add_generation_prompt\": true}",
                                     &opt, NULL, &err);
    free(out);
    free(msgs);
    nvfp4_chat_template_free(t);
    return 0;
}
