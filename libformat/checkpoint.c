/* SPDX-License-Identifier: MIT */
/*
 * A checkpoint: one safetensors file or several shards listed by
 * model.safetensors.index.json ("weight_map": tensor name -> shard file),
 * plus the directory's config.json.  Shards are opened on first use.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <nvfp4/format.h>
#include "internal.h"

#define MAX_INDEX_BYTES (256u * 1024u * 1024u)

typedef struct {
    char *file;              /* as named in the index */
    char *path;              /* dir/file */
    nvfp4_safetensors *st;   /* NULL until opened */
} shard;

typedef struct {
    char *name;
    size_t shard;
} entry;

struct nvfp4_checkpoint {
    char *dir;
    char *index_path;        /* NULL for a single file */
    nvfp4_config *config;
    shard *shards;
    size_t nshards, capshards;
    size_t *shard_hash;      /* open addressing: shard index + 1, 0 = empty */
    size_t hash_cap;         /* a power of two, > 2 * nshards */
    entry *entries;          /* sorted by name */
    size_t count;
};

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

void nvfp4_checkpoint_free(nvfp4_checkpoint *ck)
{
    if (!ck)
        return;
    for (size_t i = 0; i < ck->nshards; i++) {
        nvfp4_safetensors_free(ck->shards[i].st);
        free(ck->shards[i].file);
        free(ck->shards[i].path);
    }
    for (size_t i = 0; i < ck->count; i++)
        free(ck->entries[i].name);
    free(ck->shards);
    free(ck->shard_hash);
    free(ck->entries);
    nvfp4_config_free(ck->config);
    free(ck->index_path);
    free(ck->dir);
    free(ck);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* FNV-1a: shard names are short and few collide. */
static size_t hash_name(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603);

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return (size_t)h;
}

/* The slot of FILE in the shard hash: its entry, or the empty slot where it
 * would go. */
static size_t hash_slot(const nvfp4_checkpoint *ck, const char *file)
{
    size_t i = hash_name(file) & (ck->hash_cap - 1);

    while (ck->shard_hash[i] && strcmp(ck->shards[ck->shard_hash[i] - 1].file, file))
        i = (i + 1) & (ck->hash_cap - 1);
    return i;
}

static int hash_grow(nvfp4_checkpoint *ck)
{
    size_t cap = ck->hash_cap ? ck->hash_cap * 2 : 64;
    size_t *old = ck->shard_hash, oldcap = ck->hash_cap;

    if (!(ck->shard_hash = calloc(cap, sizeof(size_t)))) {
        ck->shard_hash = old;
        return -1;
    }
    ck->hash_cap = cap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i])
            ck->shard_hash[hash_slot(ck, ck->shards[old[i] - 1].file)] = old[i];
    free(old);
    return 0;
}

/* The index of shard FILE, added when new: a hash, since an index may name
 * as many shards as tensors (a linear search made 200k shards take minutes). */
static size_t add_shard(nvfp4_checkpoint *ck, const char *file, nvfp4_error *err)
{
    shard *s;
    size_t slot;

    if (2 * (ck->nshards + 1) >= ck->hash_cap && hash_grow(ck)) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, ck->index_path, file, -1,
                        "out of memory for the table of %zu shard names", ck->nshards + 1);
        return (size_t)-1;
    }
    slot = hash_slot(ck, file);
    if (ck->shard_hash[slot])
        return ck->shard_hash[slot] - 1;
    if (ck->nshards == ck->capshards) {
        size_t cap = ck->capshards ? 2 * ck->capshards : 8;
        s = realloc(ck->shards, cap * sizeof(*s));
        if (!s) {
            nvfp4_error_set(err, NVFP4_ERR_NOMEM, ck->index_path, file, -1,
                            "out of memory for %zu shards", cap);
            return (size_t)-1;
        }
        ck->shards = s;
        ck->capshards = cap;
    }
    s = &ck->shards[ck->nshards];
    s->st = NULL;
    s->file = strdup(file);
    s->path = nvfp4f_path_join(ck->dir, file);
    if (!s->file || !s->path) {
        free(s->file);
        free(s->path);
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, ck->index_path, file, -1,
                        "out of memory for the shard's name");
        return (size_t)-1;
    }
    ck->shard_hash[slot] = ck->nshards + 1;
    return ck->nshards++;
}

/* A shard name must stay inside the checkpoint directory. */
static int safe_shard_name(const char *f)
{
    if (!*f || f[0] == '/')
        return 0;
    for (const char *p = f; (p = strstr(p, "..")); p += 2)
        if ((p == f || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return 0;
    return 1;
}

static nvfp4_status load_index(nvfp4_checkpoint *ck, nvfp4_error *err)
{
    const char *p = ck->index_path;
    json_error_t jerr;
    json_t *root, *map, *v;
    const char *k;
    size_t len;
    char *text = nvfp4f_read_file(p, MAX_INDEX_BYTES, &len, err);
    nvfp4_status rc = NVFP4_OK;

    if (!text)
        return err ? err->status : NVFP4_ERR_IO;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return nvfp4_error_set(err, json_error_code(&jerr) == json_error_duplicate_key
                                        ? NVFP4_ERR_DUPLICATE
                                        : NVFP4_ERR_BAD_JSON,
                               p, NULL, jerr.position,
                               "not valid JSON: %s (line %d, column %d)", jerr.text,
                               jerr.line, jerr.column);
    map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!map) {
        /* config.json, tokenizer.json, ... given where the index belongs */
        json_decref(root);
        return nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, p, "weight_map", -1,
                               "is not a safetensors index: it has no \"weight_map\" "
                               "(give the model directory, its "
                               "model.safetensors.index.json or a .safetensors file)");
    }
    if (!json_is_object(map)) {
        json_decref(root);
        return nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, p, "weight_map", -1,
                               "expected an object mapping tensor names to shard files");
    }
    ck->entries = calloc(json_object_size(map) + 1, sizeof(entry));
    if (!ck->entries) {
        json_decref(root);
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, p, "weight_map", -1,
                               "out of memory for %zu index entries", json_object_size(map));
    }
    json_object_foreach(map, k, v) {
        size_t si;
        char key[NVFP4_ERROR_FIELD_LENGTH];

        snprintf(key, sizeof(key), "weight_map.%s", k);
        if (!json_is_string(v)) {
            rc = nvfp4_error_set(err, NVFP4_ERR_TYPE, p, key, -1,
                                 "expected a shard file name (string)");
            break;
        }
        if (!safe_shard_name(json_string_value(v))) {
            rc = nvfp4_error_set(err, NVFP4_ERR_INVALID, p, key, -1,
                                 "shard \"%s\" is not a file name inside %s",
                                 json_string_value(v), ck->dir);
            break;
        }
        si = add_shard(ck, json_string_value(v), err);
        if (si == (size_t)-1) {
            rc = NVFP4_ERR_NOMEM;
            break;
        }
        ck->entries[ck->count].name = strdup(k);
        ck->entries[ck->count].shard = si;
        if (!ck->entries[ck->count].name) {
            rc = nvfp4_error_set(err, NVFP4_ERR_NOMEM, p, key, -1,
                                 "out of memory for the tensor name");
            break;
        }
        ck->count++;
    }
    json_decref(root);
    if (rc)
        return rc;
    qsort(ck->entries, ck->count, sizeof(entry), cmp_entry);
    /* Every shard must exist now: a missing shard is reported at open. */
    for (size_t i = 0; i < ck->nshards; i++) {
        struct stat sb;
        if (stat(ck->shards[i].path, &sb) != 0)
            return nvfp4_error_set(err, errno == ENOENT ? NVFP4_ERR_NOT_FOUND : NVFP4_ERR_IO,
                                   p, ck->shards[i].file, -1,
                                   "shard %s named by the index %s", ck->shards[i].path,
                                   errno == ENOENT ? "does not exist" : strerror(errno));
        if (!S_ISREG(sb.st_mode))
            return nvfp4_error_set(err, NVFP4_ERR_IO, p, ck->shards[i].file, -1,
                                   "shard %s named by the index is %s, not a regular file",
                                   ck->shards[i].path, nvfp4f_file_kind(sb.st_mode));
    }
    return NVFP4_OK;
}

static nvfp4_status load_single(nvfp4_checkpoint *ck, const char *file,
                                nvfp4_error *err)
{
    size_t si = add_shard(ck, file, err);
    const nvfp4_safetensors *st;

    if (si == (size_t)-1)
        return NVFP4_ERR_NOMEM;
    ck->shards[si].st = nvfp4_safetensors_open(ck->shards[si].path, err);
    if (!ck->shards[si].st)
        return err ? err->status : NVFP4_ERR_IO;
    st = ck->shards[si].st;
    ck->entries = calloc(nvfp4_safetensors_count(st) + 1, sizeof(entry));
    if (!ck->entries)
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, ck->shards[si].path, NULL, -1,
                               "out of memory for %zu tensor entries", nvfp4_safetensors_count(st));
    for (size_t i = 0; i < nvfp4_safetensors_count(st); i++) {
        ck->entries[i].name = strdup(nvfp4_safetensors_tensor(st, i)->name);
        ck->entries[i].shard = si;
        if (!ck->entries[i].name)
            return nvfp4_error_set(err, NVFP4_ERR_NOMEM, ck->shards[si].path,
                                   nvfp4_safetensors_tensor(st, i)->name, -1,
                                   "out of memory for the tensor name");
        ck->count++;
    }
    qsort(ck->entries, ck->count, sizeof(entry), cmp_entry);
    return NVFP4_OK;
}

/* In a directory without an index: model.safetensors, else the only
 * *.safetensors file. */
static char *find_single(const char *dir, nvfp4_error *err)
{
    char *path = nvfp4f_path_join(dir, "model.safetensors");
    char *found = NULL;
    struct dirent *de;
    int n = 0;
    DIR *d;

    if (path && is_file(path)) {
        free(path);
        return strdup("model.safetensors");
    }
    free(path);
    d = opendir(dir);
    if (!d) {
        nvfp4_error_set(err, NVFP4_ERR_IO, dir, NULL, -1, "cannot read directory: %s",
                        strerror(errno));
        return NULL;
    }
    while ((de = readdir(d))) {
        if (!ends_with(de->d_name, ".safetensors"))
            continue;
        if (n++ == 0)
            found = strdup(de->d_name);
    }
    closedir(d);
    if (n == 1)
        return found;
    free(found);
    if (n == 0)
        nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, dir, NULL, -1,
                        "no model.safetensors.index.json and no .safetensors file");
    else
        nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, dir, NULL, -1,
                        "%d .safetensors files but no model.safetensors.index.json "
                        "saying which tensors each holds", n);
    return NULL;
}

nvfp4_checkpoint *nvfp4_checkpoint_open(const char *path, nvfp4_error *err)
{
    nvfp4_checkpoint *ck;
    struct stat sb;
    nvfp4_status rc;
    char *cfg_path = NULL;

    nvfp4_error_clear(err);
    if (!path) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1, "no path given");
        return NULL;
    }
    if (stat(path, &sb) != 0) {
        nvfp4_error_set(err, errno == ENOENT ? NVFP4_ERR_NOT_FOUND : NVFP4_ERR_IO, path,
                        NULL, -1, "cannot open: %s", strerror(errno));
        return NULL;
    }
    ck = calloc(1, sizeof(*ck));
    if (!ck) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, NULL, -1, "out of memory");
        return NULL;
    }
    if (S_ISDIR(sb.st_mode)) {
        ck->dir = strdup(path);
        ck->index_path = nvfp4f_path_join(path, "model.safetensors.index.json");
        if (!ck->dir || !ck->index_path)
            goto nomem;
        if (is_file(ck->index_path)) {
            rc = load_index(ck, err);
        } else {
            char *single = find_single(path, err);
            free(ck->index_path);
            ck->index_path = NULL;
            if (!single)
                goto fail;
            rc = load_single(ck, single, err);
            free(single);
        }
    } else {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        ck->dir = nvfp4f_dirname(path);
        if (!ck->dir)
            goto nomem;
        if (ends_with(path, ".json")) {
            ck->index_path = strdup(path);
            if (!ck->index_path)
                goto nomem;
            rc = load_index(ck, err);
        } else {
            rc = load_single(ck, base, err);
        }
    }
    if (rc)
        goto fail;

    cfg_path = nvfp4f_path_join(ck->dir, "config.json");
    if (!cfg_path)
        goto nomem;
    if (is_file(cfg_path)) {
        ck->config = nvfp4_config_load(cfg_path, err);
        if (!ck->config)
            goto fail;
    }
    free(cfg_path);
    return ck;
nomem:
    nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, NULL, -1, "out of memory");
fail:
    free(cfg_path);
    nvfp4_checkpoint_free(ck);
    return NULL;
}

const char *nvfp4_checkpoint_dir(const nvfp4_checkpoint *ck)
{
    return ck ? ck->dir : NULL;
}

const nvfp4_config *nvfp4_checkpoint_config(const nvfp4_checkpoint *ck)
{
    return ck ? ck->config : NULL;
}

size_t nvfp4_checkpoint_count(const nvfp4_checkpoint *ck)
{
    return ck ? ck->count : 0;
}

const char *nvfp4_checkpoint_name(const nvfp4_checkpoint *ck, size_t i)
{
    if (!ck || i >= ck->count)
        return NULL;
    return ck->entries[i].name;
}

static const entry *lookup(const nvfp4_checkpoint *ck, const char *name)
{
    entry key;

    if (!ck || !name || !ck->count)
        return NULL;
    key.name = (char *)name;
    return bsearch(&key, ck->entries, ck->count, sizeof(entry), cmp_entry);
}

int nvfp4_checkpoint_has(const nvfp4_checkpoint *ck, const char *name)
{
    return lookup(ck, name) != NULL;
}

const char *nvfp4_checkpoint_shard_of(const nvfp4_checkpoint *ck, const char *name)
{
    const entry *e = lookup(ck, name);
    return e ? ck->shards[e->shard].file : NULL;
}

static nvfp4_status open_shard(nvfp4_checkpoint *ck, size_t i, nvfp4_error *err)
{
    if (ck->shards[i].st)
        return NVFP4_OK;
    ck->shards[i].st = nvfp4_safetensors_open(ck->shards[i].path, err);
    return ck->shards[i].st ? NVFP4_OK : (err ? err->status : NVFP4_ERR_IO);
}

nvfp4_status nvfp4_checkpoint_get(nvfp4_checkpoint *ck, const char *name,
                                  const nvfp4_tensor **out, nvfp4_error *err)
{
    const entry *e = lookup(ck, name);
    const nvfp4_tensor *t;
    nvfp4_status rc;

    *out = NULL;
    if (!e)
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND,
                               ck ? (ck->index_path ? ck->index_path
                                                    : ck->shards[0].path)
                                  : NULL,
                               name, -1, "no such tensor in the checkpoint");
    rc = open_shard(ck, e->shard, err);
    if (rc)
        return rc;
    t = nvfp4_safetensors_find(ck->shards[e->shard].st, name);
    if (!t)
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, ck->shards[e->shard].path,
                               name, -1,
                               "the index places this tensor in this shard, which "
                               "does not hold it");
    *out = t;
    return NVFP4_OK;
}

int nvfp4_checkpoint_release_pages(nvfp4_checkpoint *ck, const void *p, size_t n)
{
    if (!ck || !p)
        return -1;
    for (size_t i = 0; i < ck->nshards; i++)
        if (ck->shards[i].st && nvfp4f_safetensors_release(ck->shards[i].st, p, n) == 0)
            return 0;
    return -1;
}

size_t nvfp4_checkpoint_shard_count(const nvfp4_checkpoint *ck)
{
    return ck ? ck->nshards : 0;
}

nvfp4_status nvfp4_checkpoint_shard(nvfp4_checkpoint *ck, size_t i,
                                    const nvfp4_safetensors **out, nvfp4_error *err)
{
    nvfp4_status rc;

    *out = NULL;
    if (!ck || i >= ck->nshards)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "shard index out of range");
    rc = open_shard(ck, i, err);
    if (rc)
        return rc;
    *out = ck->shards[i].st;
    return NVFP4_OK;
}
