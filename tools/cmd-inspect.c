/* SPDX-License-Identifier: MIT */
/* nvfp4 inspect: list a checkpoint's tensors, metadata and config summary. */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvfp4/quant.h>

#include "cli.h"

static void help(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 inspect PATH [--json]\n"
            "List the tensors of a safetensors checkpoint (name, dtype, shape, bytes,\n"
            "shard), its metadata, a summary of its config.json, the quantization\n"
            "dialect (quark, modelopt or compressed-tensors) with its producer and\n"
            "version, the KV-cache scheme (for Quark's FP8 KV cache, the k/v scales\n"
            "of every layer), and the scheme of every Linear layer.\n"
            "PATH is a model directory, a .safetensors file or an index .json file.\n\n"
            "  --json      print one JSON object instead of text\n"
            "  -h, --help  show this help\n");
}

/* Config summary: (label, key) pairs; the first present key of a label wins. */
static const struct {
    const char *label;
    const char *keys[3];
} summary_keys[] = {
    {"model_type", {"model_type"}},
    {"layers", {"num_hidden_layers", "n_layer"}},
    {"hidden_size", {"hidden_size", "n_embd"}},
    {"intermediate_size", {"intermediate_size"}},
    {"heads", {"num_attention_heads", "n_head"}},
    {"kv_heads", {"num_key_value_heads"}},
    {"vocab_size", {"vocab_size"}},
    {"experts", {"num_experts", "num_local_experts", "n_routed_experts"}},
    {"experts_per_token", {"num_experts_per_tok"}},
    {"quant_method", {"quantization_config.quant_method"}},
};

static json_t *config_summary(const nvfp4_config *cfg)
{
    json_t *o = json_object();
    json_t *arch = nvfp4_config_json(cfg, "architectures");

    if (json_is_array(arch) && json_array_size(arch) > 0)
        json_object_set(o, "architecture", json_array_get(arch, 0));
    for (size_t i = 0; i < sizeof(summary_keys) / sizeof(summary_keys[0]); i++) {
        for (int k = 0; k < 3 && summary_keys[i].keys[k]; k++) {
            json_t *v = nvfp4_config_json(cfg, summary_keys[i].keys[k]);
            if (v && !json_is_null(v)) {
                json_object_set(o, summary_keys[i].label, v);
                break;
            }
        }
    }
    return o;
}

/* Schemes section: for each Linear-like layer (a prefix whose .weight is
 * 2-D), the scheme quantization_config resolves it to (§3) and how the file
 * stores it, plus a count per scheme.  Adds "layers" and "scheme_counts"
 * (or "schemes_error") to ROOT. */
static void schemes_section(nvfp4_checkpoint *ck, json_t *root)
{
    nvfp4_error err;
    nvfp4_qconfig *qc = nvfp4_qconfig_parse(nvfp4_checkpoint_config(ck), &err);
    json_t *layers, *counts;

    if (!qc) {
        json_object_set_new(root, "schemes_error", json_string(err.text));
        return;
    }
    {
        /* which dialect, who wrote it (docs/DIALECTS.md) */
        json_t *q = json_object();
        json_object_set_new(q, "dialect",
                            json_string(nvfp4_dialect_name(nvfp4_qconfig_dialect(qc))));
        json_object_set_new(q, "producer", json_string(nvfp4_qconfig_producer(qc)));
        json_object_set_new(q, "kv_cache", json_string(nvfp4_qconfig_kv_cache(qc)));
        if (nvfp4_qconfig_dialect(qc) == NVFP4_DIALECT_QUARK && *nvfp4_qconfig_kv_cache(qc)) {
            /* Quark's FP8 KV cache: run (libmodel/kvcache.c); the per-layer
             * k/v scales as stored (k_proj / v_proj output_scale) */
            json_t *sc = json_array();
            char nm[96];
            json_object_set_new(q, "kv_cache_run", json_string("fp8_e4m3"));
            for (int l = 0; l < 100000; l++) {
                const nvfp4_tensor *t;
                float kv[2];
                int ok = 1;
                for (int j = 0; j < 2 && ok; j++) {
                    snprintf(nm, sizeof(nm), "model.layers.%d.self_attn.%s_proj.output_scale", l,
                             j ? "v" : "k");
                    ok = nvfp4_checkpoint_get(ck, nm, &t, NULL) == NVFP4_OK &&
                         !nvfp4_quant_read_float(t, 0, &kv[j]);
                }
                if (!ok)
                    break;
                json_array_append_new(sc, json_pack("{s:i,s:f,s:f}", "layer", l, "k_scale",
                                                    (double)kv[0], "v_scale", (double)kv[1]));
            }
            json_object_set_new(q, "kv_scales", sc);
        }
        json_object_set_new(root, "quantization", q);
    }
    layers = json_array();
    counts = json_object();
    for (size_t i = 0; i < nvfp4_checkpoint_count(ck); i++) {
        const char *name = nvfp4_checkpoint_name(ck, i), *scheme;
        size_t len = strlen(name);
        /* compressed-tensors names a packed weight weight_packed */
        int packed = len >= 15 && !strcmp(name + len - 14, ".weight_packed");
        if (packed)
            len -= 7;
        const nvfp4_tensor *t, *sc;
        char prefix[NVFP4_ERROR_FIELD_LENGTH], scname[NVFP4_ERROR_FIELD_LENGTH + 16];
        nvfp4_scheme s;
        json_t *o;
        int stored;

        if (len < 8 || strncmp(name + len - 7, ".weight", 7) != 0 ||
            len - 7 >= sizeof(prefix))
            continue;
        if (!packed && strcmp(name + len - 7, ".weight") != 0)
            continue;
        if (nvfp4_checkpoint_get(ck, name, &t, &err) || t->ndim != 2)
            continue;
        snprintf(prefix, sizeof(prefix), "%.*s", (int)(len - 7), name);
        o = json_object();
        json_object_set_new(o, "name", json_string(prefix));
        if (nvfp4_qconfig_resolve(qc, prefix, &s, &err)) {
            s = NVFP4_SCHEME_NONE; /* "unsupported" is reported as such */
            scheme = "unsupported";
            json_object_set_new(o, "error", json_string(err.text));
        } else {
            scheme = nvfp4_scheme_name(s);
        }
        snprintf(scname, sizeof(scname), "%s.weight_scale", prefix);
        stored = nvfp4_checkpoint_get(ck, scname, &sc, &err) == NVFP4_OK;
        /* Quark quantizes nn.Linear modules only: a float 2-D weight that the
         * config would cover is an embedding or the like, so it is "none";
         * the config's word is kept beside it. */
        if (!stored && s != NVFP4_SCHEME_NONE) {
            json_object_set_new(o, "config_scheme", json_string(scheme));
            scheme = "none";
        }
        json_object_set_new(o, "scheme", json_string(scheme));
        json_object_set_new(o, "stored",
                            json_string(stored ? "nvfp4" : nvfp4_dtype_name(t->dtype)));
        json_object_set_new(counts, scheme,
                            json_integer(json_integer_value(json_object_get(counts, scheme)) + 1));
        json_array_append_new(layers, o);
    }
    json_object_set_new(root, "layers", layers);
    json_object_set_new(root, "scheme_counts", counts);
    nvfp4_qconfig_free(qc);
}

static int run(int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    int as_json = 0, c, rc = CLI_OK;
    nvfp4_error err;
    nvfp4_checkpoint *ck;
    json_t *root, *tensors, *meta;
    const nvfp4_config *cfg;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'j')
            as_json = 1;
        else
            return cli_usage(&cli_inspect, "unknown option '%s'", argv[optind - 1]);
    }
    if (optind + 1 != argc)
        return cli_usage(&cli_inspect, optind == argc ? "missing PATH" : "too many arguments");

    ck = nvfp4_checkpoint_open(argv[optind], &err);
    if (!ck)
        return cli_fail_error(&err);

    root = json_object();
    tensors = json_array();
    meta = json_object();
    json_object_set_new(root, "path", json_string(argv[optind]));
    json_object_set_new(root, "shards", json_integer((json_int_t)nvfp4_checkpoint_shard_count(ck)));
    for (size_t i = 0; i < nvfp4_checkpoint_count(ck); i++) {
        const char *name = nvfp4_checkpoint_name(ck, i);
        const nvfp4_tensor *t;
        json_t *o, *shape;
        const char *slash;

        if (nvfp4_checkpoint_get(ck, name, &t, &err)) {
            rc = cli_fail_error(&err);
            goto out;
        }
        o = json_object();
        shape = json_array();
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        slash = strrchr(t->file, '/');
        json_object_set_new(o, "name", json_string(name));
        json_object_set_new(o, "dtype", json_string(nvfp4_dtype_name(t->dtype)));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "bytes", json_integer((json_int_t)t->nbytes));
        json_object_set_new(o, "offset", json_integer((json_int_t)t->offset));
        json_object_set_new(o, "shard", json_string(slash ? slash + 1 : t->file));
        json_array_append_new(tensors, o);
    }
    for (size_t s = 0; s < nvfp4_checkpoint_shard_count(ck); s++) {
        const nvfp4_safetensors *st;
        const char *k, *v;
        if (nvfp4_checkpoint_shard(ck, s, &st, &err)) {
            rc = cli_fail_error(&err);
            goto out;
        }
        for (size_t m = 0; !nvfp4_safetensors_metadata(st, m, &k, &v); m++)
            json_object_set_new(meta, k, json_string(v));
    }
    json_object_set(root, "tensors", tensors);
    json_object_set(root, "metadata", meta);
    cfg = nvfp4_checkpoint_config(ck);
    if (cfg)
        json_object_set_new(root, "config", config_summary(cfg));
    schemes_section(ck, root);

    if (as_json) {
        json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
    } else {
        const char *k;
        json_t *v;
        uint64_t total = 0;

        printf("checkpoint: %s\nshards: %zu\ntensors: %zu\n\n", argv[optind],
               nvfp4_checkpoint_shard_count(ck), json_array_size(tensors));
        printf("%-56s %-8s %-20s %12s  %s\n", "NAME", "DTYPE", "SHAPE", "BYTES", "SHARD");
        for (size_t i = 0; i < json_array_size(tensors); i++) {
            const nvfp4_tensor *t;
            char shp[128];
            json_t *o = json_array_get(tensors, i);
            nvfp4_checkpoint_get(ck, json_string_value(json_object_get(o, "name")), &t, &err);
            nvfp4_tensor_shape_text(t, shp, sizeof(shp));
            total += t->nbytes;
            printf("%-56s %-8s %-20s %12" PRIu64 "  %s\n", t->name,
                   nvfp4_dtype_name(t->dtype), shp, t->nbytes,
                   json_string_value(json_object_get(o, "shard")));
        }
        printf("\ntotal tensor bytes: %" PRIu64 "\n", total);
        if (json_object_size(meta)) {
            printf("\nmetadata:\n");
            json_object_foreach(meta, k, v)
                printf("  %s = %s\n", k, json_string_value(v));
        }
        if (json_object_get(root, "config")) {
            printf("\nconfig.json:\n");
            json_object_foreach(json_object_get(root, "config"), k, v) {
                char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
                printf("  %-18s %s\n", k, s ? s : "?");
                free(s);
            }
        }
        if (json_object_get(root, "schemes_error")) {
            printf("\nschemes: %s\n",
                   json_string_value(json_object_get(root, "schemes_error")));
        } else if (json_array_size(json_object_get(root, "layers"))) {
            json_t *layers = json_object_get(root, "layers");
            json_t *q = json_object_get(root, "quantization");
            const char *prod = json_string_value(json_object_get(q, "producer"));
            const char *kv = json_string_value(json_object_get(q, "kv_cache"));
            json_t *ks = json_object_get(q, "kv_scales");
            printf("\ndialect: %s%s%s%s\n", json_string_value(json_object_get(q, "dialect")),
                   prod && *prod ? " (" : "", prod && *prod ? prod : "",
                   prod && *prod ? ")" : "");
            if (kv && *kv && json_object_get(q, "kv_cache_run")) {
                printf("kv cache: %s per-tensor k/v scales (kv_cache_quant_config); run as "
                       "FP8 E4M3 quantize-dequantize on every write (vLLM's kv_cache_dtype "
                       "\"fp8\")\n", kv);
                for (size_t i = 0; i < json_array_size(ks); i++) {
                    json_t *o = json_array_get(ks, i);
                    printf("  layer %-4lld k_scale %-12g v_scale %g\n",
                           (long long)json_integer_value(json_object_get(o, "layer")),
                           json_real_value(json_object_get(o, "k_scale")),
                           json_real_value(json_object_get(o, "v_scale")));
                }
            } else if (kv && *kv) {
                printf("kv cache: %s in the config; run in float32 (vLLM's kv_cache_dtype "
                       "\"auto\")\n", kv);
            }
            printf("\nschemes (quantization_config; stored as):\n");
            for (size_t i = 0; i < json_array_size(layers); i++) {
                json_t *o = json_array_get(layers, i), *e = json_object_get(o, "error");
                json_t *cs = json_object_get(o, "config_scheme");
                printf("  %-56s %-11s %-6s%s%s%s%s%s\n",
                       json_string_value(json_object_get(o, "name")),
                       json_string_value(json_object_get(o, "scheme")),
                       json_string_value(json_object_get(o, "stored")),
                       cs ? "  (config says " : "", cs ? json_string_value(cs) : "",
                       cs ? "; not a quantized Linear)" : "", e ? "  " : "",
                       e ? json_string_value(e) : "");
            }
            printf("scheme counts:");
            json_object_foreach(json_object_get(root, "scheme_counts"), k, v)
                printf(" %s %" JSON_INTEGER_FORMAT, k, json_integer_value(v));
            printf("\n");
        }
    }
out:
    json_decref(tensors);
    json_decref(meta);
    json_decref(root);
    nvfp4_checkpoint_free(ck);
    return rc;
}

const cli_command cli_inspect = {
    "inspect", "list tensors, metadata and config of a checkpoint", run, help,
};
