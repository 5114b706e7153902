/* SPDX-License-Identifier: MIT */
/* libFuzzer harness: nvfp4 serve's request parser (tools/serve/request.c),
 * body bytes to a validated request or an OpenAI-style error, for both
 * /v1/completions and /v1/chat/completions.  Whatever the bytes, it must
 * return in bounded time, leak nothing, and either fill a request whose
 * fields hold their documented ranges or an error with a 4xx/5xx status. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/serve/serve.h"

static void check_request(const srv_request *r)
{
    if (r->kind == SRV_COMPLETION && !r->prompt && !r->prompt_ids)
        abort();
    if (r->kind == SRV_CHAT && (!r->messages || r->n_messages == 0))
        abort();
    if (r->temperature < 0 || r->temperature > 2 || r->top_p <= 0 || r->top_p > 1 ||
        r->min_p < 0 || r->min_p > 1 || r->n_stop > SRV_MAX_STOP ||
        r->top_logprobs < 0 || r->top_logprobs > SRV_MAX_TOP_LOGPROBS ||
        (r->max_tokens != -1 && r->max_tokens < 1))
        abort();
    for (size_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i][0] || strlen(r->stop[i]) > SRV_MAX_STOP_LEN)
            abort();
    for (size_t i = 0; i < r->n_messages; i++)
        if (!r->messages[i].role || !r->messages[i].content)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int k = 0; k < 2; k++) {
        srv_request r;
        srv_error e;
        memset(&e, 0, sizeof e);
        if (srv_request_parse(k ? SRV_CHAT : SRV_COMPLETION, (const char *)data, size, &r,
                              &e) == 0) {
            check_request(&r);
            srv_request_free(&r);
        } else if (e.status < 400 || e.status > 599 || !e.message[0]) {
            abort();
        }
    }
    return 0;
}
