/* SPDX-License-Identifier: MIT */
/*
 * Opening a model: config.json to hyper-parameters (arch.c), the tensor plan
 * (plan.c), the checks against hostile input (validate.c), the backend, the
 * weights (model-load.c) and the tokenizer; freeing it; its accessors.  The
 * forward pass lives in context.c.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model-internal.h"

static nvfp4_status nomem(nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
}

/* ---- public: open / free ---------------------------------------------------- */

void nvfp4_model_options_init(nvfp4_model_options *opt)
{
    memset(opt, 0, sizeof(*opt));
}

const char *nvfp4_model_version(void)
{
    return PACKAGE_VERSION;
}

nvfp4_model *nvfp4_model_open(const char *path, const nvfp4_model_options *opt,
                              nvfp4_error *err)
{
    nvfp4_model *m;
    json_t *archs;
    const char *an;
    char *tokpath;

    nvfp4_error_clear(err);
    m = calloc(1, sizeof(*m));
    if (!m) {
        nomem(err);
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    if (opt)
        m->opt = *opt;
    m->ck = nvfp4_checkpoint_open(path, err);
    if (!m->ck)
        goto fail;
    m->cfg = nvfp4_checkpoint_config(m->ck);
    if (!m->cfg) {
        nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_checkpoint_dir(m->ck),
                        "config.json", -1, "a model directory needs a config.json");
        goto fail;
    }
    archs = nvfp4_config_json(m->cfg, "architectures");
    an = json_is_array(archs) ? json_string_value(json_array_get(archs, 0)) : NULL;
    m->arch = nvfp4m_arch_find(an);
    if (!m->arch) {
        nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(m->cfg),
                        "architectures", -1,
                        "architecture %s%s%s is not supported; supported: %s",
                        an ? "\"" : "", an ? an : "(none given)", an ? "\"" : "",
                        nvfp4m_arch_supported_list());
        goto fail;
    }
    snprintf(m->arch_name, sizeof(m->arch_name), "%s", an);
    if (nvfp4m_hparams_read(m->cfg, m->arch, &m->hp, err) ||
        nvfp4m_check_counts(m->ck, m->cfg, m->arch, &m->hp, err))
        goto fail;
    m->qc = nvfp4_qconfig_parse(m->cfg, err);
    if (!m->qc || nvfp4m_par_open(m, err))
        goto fail;

    /* One plan of every tensor: all missing ones are named at once, before
     * the scan for non-finite values and before anything is uploaded. */
    if (nvfp4m_plan_build(&m->plan, m->ck, m->arch, &m->hp, err) ||
        nvfp4m_plan_check_missing(&m->plan, m->ck, m->arch_name, err) ||
        nvfp4m_check_finite(m->ck, err))
        goto fail;
    m->layers = calloc((size_t)m->hp.layers, sizeof(layer_t));
    if (!m->layers) {
        nomem(err);
        goto fail;
    }

    m->be = nvfp4_backend_open(m->opt.backend, err);
    if (!m->be)
        goto fail;
    if (m->opt.threads > 0)
        nvfp4_backend_set_threads(m->be, m->opt.threads);
    if (nvfp4m_par_open_device(m, err))
        goto fail;
    m->max_ctx = m->opt.max_ctx > 0 ? m->opt.max_ctx
                                    : (m->hp.max_pos < 4096 ? m->hp.max_pos : 4096);
    if (nvfp4m_model_load(m, err) ||
        nvfp4m_plan_warn_unexpected(&m->plan, m->ck, m->opt.quiet, err))
        goto fail;

    tokpath = malloc(strlen(nvfp4_checkpoint_dir(m->ck)) + 32);
    if (!tokpath) {
        nomem(err);
        goto fail;
    }
    sprintf(tokpath, "%s/tokenizer.json", nvfp4_checkpoint_dir(m->ck));
    {
        FILE *f = fopen(tokpath, "rb");
        if (f) {
            fclose(f);
            m->tok = nvfp4_tokenizer_load(tokpath, err);
            if (!m->tok || nvfp4m_check_tokenizer(m->tok, tokpath, m->hp.vocab, err)) {
                free(tokpath);
                goto fail;
            }
        }
    }
    free(tokpath);
    return m;
fail:
    nvfp4_model_free(m);
    return NULL;
}

void nvfp4_model_free(nvfp4_model *m)
{
    if (!m)
        return;
    nvfp4m_default_free(m);
    nvfp4m_model_unload(m);
    nvfp4m_par_free(m);
    nvfp4_backend_free(m->be);
    nvfp4_tokenizer_free(m->tok);
    nvfp4_qconfig_free(m->qc);
    nvfp4m_hparams_free(&m->hp);
    nvfp4_checkpoint_free(m->ck);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

const char *nvfp4_model_arch(const nvfp4_model *m) { return m->arch_name; }
int nvfp4_model_vocab_size(const nvfp4_model *m) { return (int)m->hp.vocab; }
int nvfp4_model_max_ctx(const nvfp4_model *m) { return (int)m->max_ctx; }
nvfp4_backend *nvfp4_model_backend(nvfp4_model *m) { return m->be; }
const nvfp4_tokenizer *nvfp4_model_tokenizer(const nvfp4_model *m) { return m->tok; }
int32_t nvfp4_model_bos(const nvfp4_model *m) { return (int32_t)m->hp.bos; }
int32_t nvfp4_model_eos(const nvfp4_model *m) { return (int32_t)m->hp.eos; }
