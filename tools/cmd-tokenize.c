/* SPDX-License-Identifier: MIT */
/* nvfp4 tokenize: the ids of a text under a tokenizer.json. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <nvfp4/model.h>

#include "cli-tokens.h"

static void help(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 tokenize TOKENIZER (--text STR | --file FILE) [--json]\n"
            "Print the token ids of a UTF-8 text, as the Hugging Face tokenizers library's\n"
            "encode(text, add_special_tokens=False) gives them (special tokens written in\n"
            "the text are recognised).\n"
            "TOKENIZER is a tokenizer.json or a model directory holding one.\n\n"
            "  --text STR   the text\n"
            "  --file FILE  read the text from FILE ('-': standard input)\n"
            "  --json       print {\"ids\": [...], \"count\": N, \"decoded\": ...}\n"
            "  -h, --help   show this help\n");
}

static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);

    while (buf && (r = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    if (!buf || ferror(stdin)) {
        free(buf);
        cli_fail("cannot read standard input");
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int run(int argc, char **argv)
{
    enum { OPT_TEXT = 1000, OPT_FILE, OPT_JSON };
    static const struct option opts[] = {{"text", required_argument, NULL, OPT_TEXT},
                                         {"file", required_argument, NULL, OPT_FILE},
                                         {"json", no_argument, NULL, OPT_JSON},
                                         {NULL, 0, NULL, 0}};
    const char *text_arg = NULL, *file_arg = NULL;
    char *text = NULL, *path = NULL;
    size_t len = 0, n = 0;
    int32_t *ids = NULL;
    int as_json = 0, c, rc = CLI_OK;
    nvfp4_tokenizer *tok;
    nvfp4_error err;
    struct stat sb;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == OPT_TEXT)
            text_arg = optarg;
        else if (c == OPT_FILE)
            file_arg = optarg;
        else if (c == OPT_JSON)
            as_json = 1;
        else
            return cli_usage(&cli_tokenize, "unknown option '%s'", argv[optind - 1]);
    }
    if (optind + 1 != argc)
        return cli_usage(&cli_tokenize,
                         optind == argc ? "missing TOKENIZER" : "too many arguments");
    if (!text_arg == !file_arg)
        return cli_usage(&cli_tokenize, "give exactly one of --text and --file");

    if (stat(argv[optind], &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t k = strlen(argv[optind]);
        if (!(path = malloc(k + sizeof("/tokenizer.json"))))
            return cli_fail("out of memory");
        memcpy(path, argv[optind], k);
        memcpy(path + k, "/tokenizer.json", sizeof("/tokenizer.json"));
    } else if (!(path = strdup(argv[optind])))
        return cli_fail("out of memory");
    nvfp4_error_clear(&err);
    tok = nvfp4_tokenizer_load(path, &err);
    free(path);
    if (!tok)
        return cli_fail_error(&err);

    if (text_arg) {
        text = strdup(text_arg);
        len = text ? strlen(text) : 0;
        if (!text)
            rc = cli_fail("out of memory");
    } else {
        text = strcmp(file_arg, "-") ? cli_read_file(file_arg, &len) : read_stdin(&len);
        if (!text)
            rc = CLI_INVALID;
    }
    if (rc == CLI_OK && nvfp4_tokenizer_encode(tok, text, len, &ids, &n, &err) != NVFP4_OK)
        rc = cli_fail_error(&err);
    if (rc == CLI_OK && as_json) {
        json_t *o = json_object(), *arr = json_array();
        char *decoded = nvfp4_tokenizer_decode(tok, ids, n, 0, &err), *s;
        for (size_t i = 0; i < n; i++)
            json_array_append_new(arr, json_integer(ids[i]));
        json_object_set_new(o, "ids", arr);
        json_object_set_new(o, "count", json_integer((json_int_t)n));
        if (decoded)
            json_object_set_new(o, "decoded", json_string(decoded));
        s = json_dumps(o, JSON_COMPACT);
        if (s)
            puts(s);
        else
            rc = cli_fail("cannot format JSON");
        free(s);
        free(decoded);
        json_decref(o);
    } else if (rc == CLI_OK) {
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? " " : "", (int)ids[i]);
        putchar('\n');
    }
    free(ids);
    free(text);
    nvfp4_tokenizer_free(tok);
    return rc;
}

const cli_command cli_tokenize = {
    .name = "tokenize",
    .summary = "print the token ids of a text (tokenizer.json)",
    .run = run,
    .help = help,
};
