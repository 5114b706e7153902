/* SPDX-License-Identifier: MIT */
/* nvfp4 template: render a chat template over a message list. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <nvfp4/model.h>

#include "cli.h"

static void help(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 template MODEL_OR_TEMPLATE --messages FILE.json [OPTIONS]\n"
            "Print the text a chat template makes of a list of messages, as transformers'\n"
            "apply_chat_template(messages, tokenize=False) does.\n"
            "MODEL_OR_TEMPLATE is a model directory (chat_template.jinja, else\n"
            "tokenizer_config.json's chat_template), a tokenizer_config.json, or a file\n"
            "holding the template text.\n\n"
            "  --messages FILE         a JSON array of {\"role\", \"content\"} objects\n"
            "                          ('-': standard input)\n"
            "  --no-generation-prompt  add_generation_prompt false (default: true)\n"
            "  --vars FILE             a JSON object of further variables (bos_token,\n"
            "                          eos_token, tools, ...)\n"
            "  --time T                strftime_now's time: Unix seconds, shown in UTC\n"
            "                          (default: the current local time)\n"
            "  -h, --help              show this help\n");
}

static char *slurp(const char *path)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    size_t cap = 1 << 16, n = 0, r;
    char *buf;

    if (!f) {
        cli_fail("%s: cannot open", path);
        return NULL;
    }
    buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *nb = cap < ((size_t)1 << 30) ? realloc(buf, cap *= 2) : NULL;
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    if (!buf || ferror(f)) {
        free(buf);
        buf = NULL;
        cli_fail("%s: cannot read", path);
    } else {
        buf[n] = '\0';
    }
    if (f != stdin)
        fclose(f);
    return buf;
}

static int run(int argc, char **argv)
{
    enum { OPT_MESSAGES = 1000, OPT_NOGEN, OPT_VARS, OPT_TIME };
    static const struct option opts[] = {{"messages", required_argument, NULL, OPT_MESSAGES},
                                         {"no-generation-prompt", no_argument, NULL, OPT_NOGEN},
                                         {"vars", required_argument, NULL, OPT_VARS},
                                         {"time", required_argument, NULL, OPT_TIME},
                                         {NULL, 0, NULL, 0}};
    const char *messages = NULL, *vars = NULL, *src;
    char *msgs = NULL, *extra = NULL, *text = NULL, *out = NULL, *end;
    int gen = 1, c, rc = CLI_OK;
    nvfp4_chat_template *t = NULL;
    nvfp4_chat_options opt;
    nvfp4_error err;
    struct stat st;
    size_t len, slen;

    nvfp4_chat_options_init(&opt);
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case OPT_MESSAGES: messages = optarg; break;
        case OPT_NOGEN: gen = 0; break;
        case OPT_VARS: vars = optarg; break;
        case OPT_TIME:
            opt.now = strtoll(optarg, &end, 10);
            if (*end || opt.now < 0)
                return cli_usage(&cli_template, "bad time '%s'", optarg);
            break;
        default:
            return cli_usage(&cli_template, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind + 1 != argc)
        return cli_usage(&cli_template,
                         optind == argc ? "missing MODEL_OR_TEMPLATE" : "too many arguments");
    if (!messages)
        return cli_usage(&cli_template, "--messages is required");
    src = argv[optind];
    slen = strlen(src);
    if (stat(src, &st) == 0 && S_ISDIR(st.st_mode)) {
        t = nvfp4_chat_template_load(src, &err);
    } else if (slen >= 21 && !strcmp(src + slen - 21, "tokenizer_config.json")) {
        char *dir = strdup(src);
        if (dir) {
            dir[slen - 21] = 0;
            t = nvfp4_chat_template_load(dir[0] ? dir : ".", &err);
        }
        free(dir);
        if (!dir)
            return cli_fail("out of memory");
    } else {
        if (!(text = slurp(src)))
            return CLI_INVALID;
        t = nvfp4_chat_template_parse(text, strlen(text), src, &err);
    }
    if (!t) {
        rc = cli_fail_error(&err);
        goto out;
    }
    if (!(msgs = slurp(messages))) {
        rc = CLI_INVALID;
        goto out;
    }
    if (vars) {
        /* the file's object, with add_generation_prompt added in front (the
         * file's own value wins) */
        char *v = slurp(vars), *p;
        if (!v) {
            rc = CLI_INVALID;
            goto out;
        }
        p = v + strspn(v, " \t\r\n");
        if (*p != '{') {
            free(v);
            rc = cli_fail("%s: expected a JSON object", vars);
            goto out;
        }
        p++;
        len = strlen(p);
        extra = malloc(len + 64);
        if (extra)
            snprintf(extra, len + 64, "{\"add_generation_prompt\": %s%s%s",
                     gen ? "true" : "false", p[strspn(p, " \t\r\n")] == '}' ? "" : ", ", p);
        free(v);
    } else {
        extra = strdup(gen ? "{\"add_generation_prompt\": true}"
                           : "{\"add_generation_prompt\": false}");
    }
    if (!extra) {
        rc = cli_fail("out of memory");
        goto out;
    }
    out = nvfp4_chat_template_render(t, msgs, extra, &opt, &len, &err);
    if (!out) {
        rc = cli_fail_error(&err);
        goto out;
    }
    fwrite(out, 1, len, stdout);
out:
    free(out);
    free(extra);
    free(msgs);
    free(text);
    nvfp4_chat_template_free(t);
    return rc;
}

const cli_command cli_template = {
    .name = "template",
    .summary = "render a chat template over a list of messages",
    .run = run,
    .help = help,
};
