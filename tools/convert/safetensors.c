/*
 * safetensors.c - .safetensors parsing and validation, sharded directories
 * (see safetensors.h for the format and the checks).
 *
 * The JSON header is parsed with cJSON.  Numbers arrive as doubles, so every
 * integer field is checked to be integral and below 2^53 before it is used;
 * byte sizes are then computed with overflow-checked 64-bit arithmetic.
 */
#include "convert/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "tensor/dtype.h"

#define MAX_EXACT_DOUBLE 9007199254740992.0 /* 2^53 */

const char *st_printable(const char *s, char buf[ST_PRINTABLE_MAX]) {
    size_t i = 0;
    for (; s && s[i] && i < 80; i++) buf[i] = (unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f ? '?' : s[i];
    if (s && s[i]) memcpy(buf + i, "...", 3), i += 3;
    buf[i] = '\0';
    return buf;
}

void st_tensors_free(st_tensor *t, size_t n) {
    if (!t) return;
    for (size_t i = 0; i < n; i++) free(t[i].name);
    free(t);
}

/* A JSON number that is a non-negative integer exactly representable. */
static bool json_u64(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0.0) || d > MAX_EXACT_DOUBLE || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

static int dtype_of(const char *s, uint32_t *dt, uint32_t *elsize) {
    if (!strcmp(s, "F32")) *dt = KITE_DTYPE_F32, *elsize = 4;
    else if (!strcmp(s, "F16")) *dt = KITE_DTYPE_F16, *elsize = 2;
    else if (!strcmp(s, "BF16")) *dt = KITE_DTYPE_BF16, *elsize = 2;
    else return -1;
    return 0;
}

static const char *dtype_st_name(uint32_t dt) {
    return dt == KITE_DTYPE_F32 ? "F32" : dt == KITE_DTYPE_F16 ? "F16" : "BF16";
}

/* Fills t from one header entry; data_size is the size of the data section. */
static int parse_entry(const cJSON *e, const char *name, const uint8_t *data, uint64_t data_size, st_tensor *t,
                       uint64_t *begin) {
    char nm[ST_PRINTABLE_MAX], dt[ST_PRINTABLE_MAX];
    st_printable(e->string, nm);
    if (!cJSON_IsObject(e)) return err_set(KITE_E_FORMAT, "%s: tensor '%s': entry is not an object", name, nm);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd)) return err_set(KITE_E_FORMAT, "%s: tensor '%s': 'dtype' missing or not a string", name, nm);
    if (!cJSON_IsArray(js)) return err_set(KITE_E_FORMAT, "%s: tensor '%s': 'shape' missing or not an array", name, nm);
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return err_set(KITE_E_FORMAT, "%s: tensor '%s': 'data_offsets' must be an array [begin, end]", name, nm);
    uint32_t elsize;
    if (dtype_of(jd->valuestring, &t->dtype, &elsize))
        return err_set(KITE_E_UNSUPPORTED, "%s: tensor '%s': dtype '%s' is not supported (F32, F16, BF16)", name,
                       nm, st_printable(jd->valuestring, dt));
    int nd = cJSON_GetArraySize(js);
    if (nd > ST_MAX_DIMS)
        return err_set(KITE_E_FORMAT, "%s: tensor '%s': 'shape' has %d dims (max %d)", name, nm, nd, ST_MAX_DIMS);
    t->n_dims = (uint32_t)nd;
    uint64_t count = 1;
    char shape_txt[128] = "";
    size_t sl = 0;
    for (int i = 0; i < nd; i++) {
        uint64_t v;
        if (!json_u64(cJSON_GetArrayItem(js, i), &v) || v > INT64_MAX / 2)
            return err_set(KITE_E_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", name, nm, i);
        t->shape[i] = (int64_t)v;
        if (v != 0 && count > UINT64_MAX / v)
            return err_set(KITE_E_FORMAT, "%s: tensor '%s': shape overflows", name, nm);
        count *= v;
        sl += (size_t)snprintf(shape_txt + sl, sizeof shape_txt - sl, "%s%llu", i ? ", " : "", (unsigned long long)v);
        if (sl >= sizeof shape_txt) sl = sizeof shape_txt - 1;
    }
    for (int i = nd; i < ST_MAX_DIMS; i++) t->shape[i] = 1;
    uint64_t b, en;
    if (!json_u64(cJSON_GetArrayItem(jo, 0), &b) || !json_u64(cJSON_GetArrayItem(jo, 1), &en))
        return err_set(KITE_E_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers", name, nm);
    if (b > en)
        return err_set(KITE_E_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
                       nm, (unsigned long long)b, (unsigned long long)en);
    if (en > data_size)
        return err_set(KITE_E_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data (%llu bytes)",
                       name, nm, (unsigned long long)b, (unsigned long long)en, (unsigned long long)data_size);
    if (count > UINT64_MAX / elsize || count * elsize != en - b)
        return err_set(KITE_E_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but %s shape [%s] needs %s%llu",
                       name, nm, (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b),
                       dtype_st_name(t->dtype), shape_txt, count > UINT64_MAX / elsize ? "more than " : "",
                       (unsigned long long)(count > UINT64_MAX / elsize ? UINT64_MAX : count * elsize));
    t->nbytes = en - b;
    t->data = data + b;
    *begin = b;
    return KITE_OK;
}

typedef struct span {
    uint64_t begin, end;
    size_t idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

int st_parse(const void *buf, size_t size, const char *name, st_tensor **out, size_t *n_out) {
    const uint8_t *p = buf;
    if (size < 8) return err_set(KITE_E_FORMAT, "%s: file of %zu bytes is too short for the 8-byte header length", name, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
    if (hlen < 2 || hlen > size - 8 || hlen > ST_MAX_HEADER)
        return err_set(KITE_E_FORMAT, "%s: header length %llu is outside 2..%llu (file size %zu)", name,
                       (unsigned long long)hlen,
                       (unsigned long long)(size - 8 < ST_MAX_HEADER ? size - 8 : ST_MAX_HEADER), size);
    const uint8_t *data = p + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    st_tensor *ts = NULL;
    span *spans = NULL;
    size_t n = 0;
    int rc = KITE_OK;
    cJSON *root = cJSON_ParseWithLength((const char *)p + 8, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        rc = err_set(KITE_E_FORMAT, "%s: header is not a JSON object", name);
        goto done;
    }
    size_t cap = (size_t)cJSON_GetArraySize(root);
    ts = calloc(cap ? cap : 1, sizeof *ts);
    spans = calloc(cap ? cap : 1, sizeof *spans);
    if (!ts || !spans) {
        rc = err_set(KITE_E_NOMEM, "%s: out of memory for %zu tensors", name, cap);
        goto done;
    }
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) {
                rc = err_set(KITE_E_FORMAT, "%s: '__metadata__' is not an object", name);
                goto done;
            }
            for (const cJSON *m = e->child; m; m = m->next)
                if (!cJSON_IsString(m)) {
                    char nm[ST_PRINTABLE_MAX];
                    rc = err_set(KITE_E_FORMAT, "%s: __metadata__ '%s' is not a string", name, st_printable(m->string, nm));
                    goto done;
                }
            continue;
        }
        st_tensor *t = &ts[n];
        if ((rc = parse_entry(e, name, data, data_size, t, &spans[n].begin))) goto done;
        if (!(t->name = strdup(e->string))) {
            rc = err_set(KITE_E_NOMEM, "%s: out of memory", name);
            goto done;
        }
        t->file = name;
        spans[n].end = spans[n].begin + t->nbytes;
        spans[n].idx = n;
        n++;
    }
    /* No overlap and no holes: sorted by begin, each starts where the last ended. */
    qsort(spans, n, sizeof *spans, cmp_span);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        if (spans[i].begin < pos) {
            char nm[ST_PRINTABLE_MAX];
            rc = err_set(KITE_E_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] overlap another tensor", name,
                         st_printable(ts[spans[i].idx].name, nm), (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end);
            goto done;
        }
        if (spans[i].begin > pos) {
            char nm[ST_PRINTABLE_MAX];
            rc = err_set(KITE_E_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] leave a hole at byte %llu", name,
                         st_printable(ts[spans[i].idx].name, nm), (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end,
                         (unsigned long long)pos);
            goto done;
        }
        pos = spans[i].end;
    }
    if (pos != data_size) {
        rc = err_set(KITE_E_FORMAT, "%s: tensors cover %llu bytes of data but the file has %llu after the header", name,
                     (unsigned long long)pos, (unsigned long long)data_size);
        goto done;
    }
    qsort(ts, n, sizeof *ts, cmp_tensor_name);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(ts[i - 1].name, ts[i].name)) {
            char nm[ST_PRINTABLE_MAX];
            rc = err_set(KITE_E_FORMAT, "%s: tensor '%s' is listed twice", name, st_printable(ts[i].name, nm));
            goto done;
        }
done:
    cJSON_Delete(root);
    free(spans);
    if (rc) {
        st_tensors_free(ts, n);
        return rc;
    }
    *out = ts;
    *n_out = n;
    return KITE_OK;
}

/* ---- files and directories ---------------------------------------------- */

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
    st_tensor *tensors;
    size_t n_tensors;
} st_file;

struct st_model {
    st_file *files;
    size_t n_files;
    const st_tensor **index; /* [n] sorted by name, pointing into files[].tensors */
    size_t n;
};

static int map_file(const char *path, void **map, size_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return err_set(KITE_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int rc = KITE_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = err_set(KITE_E_IO, "%s: not a regular file", path);
        goto out;
    }
    *size = (size_t)st.st_size;
    *map = NULL;
    if (*size) {
        void *m = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = err_set(KITE_E_IO, "%s: cannot map: %s", path, strerror(errno));
            goto out;
        }
        *map = m;
    }
out:
    close(fd);
    return rc;
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    memcpy(s, dir, a);
    s[a] = '/';
    memcpy(s + a + 1, name, b + 1);
    return s;
}

void st_model_free(st_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_files; i++) {
        st_tensors_free(m->files[i].tensors, m->files[i].n_tensors);
        if (m->files[i].map) munmap(m->files[i].map, m->files[i].size);
        free(m->files[i].path);
    }
    free(m->files);
    free(m->index);
    free(m);
}

static int open_file(st_file *f, const char *dir, const char *name) {
    if (!(f->path = path_join(dir, name))) return err_set(KITE_E_NOMEM, "out of memory");
    int rc = map_file(f->path, &f->map, &f->size);
    if (rc) return rc;
    return st_parse(f->map ? f->map : "", f->size, f->path, &f->tensors, &f->n_tensors);
}

static int cmp_tensor_ptr(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* A shard name from the index: a plain file name in the same directory. */
static bool safe_shard_name(const char *s) {
    return s[0] && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/') && strlen(s) < 4096;
}

static int read_text(const char *path, char **out, size_t *len) {
    void *map;
    size_t size;
    int rc = map_file(path, &map, &size);
    if (rc) return rc;
    char *s = malloc(size + 1);
    if (!s) {
        if (map) munmap(map, size);
        return err_set(KITE_E_NOMEM, "%s: out of memory", path);
    }
    if (size) memcpy(s, map, size);
    s[size] = '\0';
    if (map) munmap(map, size);
    *out = s;
    *len = size;
    return KITE_OK;
}

int st_model_open(const char *dir, st_model **out) {
    st_model *m = calloc(1, sizeof *m);
    char *index_path = path_join(dir, "model.safetensors.index.json");
    char *text = NULL;
    cJSON *root = NULL;
    int rc = KITE_OK;
    if (!m || !index_path) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    if (access(index_path, F_OK) != 0) {
        char *single = path_join(dir, "model.safetensors");
        if (!single) {
            rc = err_set(KITE_E_NOMEM, "out of memory");
            goto fail;
        }
        bool have = access(single, F_OK) == 0;
        free(single);
        if (!have) {
            rc = err_set(KITE_E_NOT_FOUND, "%s: no model.safetensors or model.safetensors.index.json", dir);
            goto fail;
        }
        if (!(m->files = calloc(1, sizeof *m->files))) {
            rc = err_set(KITE_E_NOMEM, "out of memory");
            goto fail;
        }
        m->n_files = 1;
        if ((rc = open_file(&m->files[0], dir, "model.safetensors"))) goto fail;
    } else {
        size_t len = 0;
        if ((rc = read_text(index_path, &text, &len))) goto fail;
        root = cJSON_ParseWithLength(text, len);
        const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
        if (!cJSON_IsObject(wm)) {
            rc = err_set(KITE_E_FORMAT, "%s: %s", index_path, root ? "'weight_map' missing or not an object" : "not valid JSON");
            goto fail;
        }
        /* distinct shard names, in order of first appearance */
        size_t cap = (size_t)cJSON_GetArraySize(wm);
        if (!(m->files = calloc(cap ? cap : 1, sizeof *m->files))) {
            rc = err_set(KITE_E_NOMEM, "out of memory");
            goto fail;
        }
        for (const cJSON *e = wm->child; e; e = e->next) {
            if (!cJSON_IsString(e) || !safe_shard_name(e->valuestring)) {
                char nm[ST_PRINTABLE_MAX];
                rc = err_set(KITE_E_FORMAT, "%s: weight_map '%s': shard must be a file name in the same directory",
                             index_path, st_printable(e->string, nm));
                goto fail;
            }
            size_t k = 0;
            while (k < m->n_files && strcmp(strrchr(m->files[k].path, '/') + 1, e->valuestring)) k++;
            if (k == m->n_files) {
                if ((rc = open_file(&m->files[m->n_files++], dir, e->valuestring))) goto fail;
            }
        }
    }
    for (size_t i = 0; i < m->n_files; i++) m->n += m->files[i].n_tensors;
    if (!(m->index = malloc((m->n ? m->n : 1) * sizeof *m->index))) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    size_t k = 0;
    for (size_t i = 0; i < m->n_files; i++)
        for (size_t j = 0; j < m->files[i].n_tensors; j++) m->index[k++] = &m->files[i].tensors[j];
    qsort(m->index, m->n, sizeof *m->index, cmp_tensor_ptr);
    for (size_t i = 1; i < m->n; i++)
        if (!strcmp(m->index[i - 1]->name, m->index[i]->name)) {
            char nm[ST_PRINTABLE_MAX];
            rc = err_set(KITE_E_FORMAT, "%s: tensor '%s' is in both %s and %s", dir, st_printable(m->index[i]->name, nm),
                         m->index[i - 1]->file, m->index[i]->file);
            goto fail;
        }
    if (root) {
        /* The index and the shards must agree exactly. */
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
        size_t n_map = 0;
        for (const cJSON *e = wm->child; e; e = e->next, n_map++) {
            const st_tensor *t = st_model_find(m, e->string);
            char nm[ST_PRINTABLE_MAX], sh[ST_PRINTABLE_MAX];
            st_printable(e->string, nm);
            st_printable(e->valuestring, sh);
            if (!t) {
                rc = err_set(KITE_E_FORMAT, "%s: weight_map names tensor '%s' but %s does not hold it", index_path,
                             nm, sh);
                goto fail;
            }
            const char *base = strrchr(t->file, '/') + 1;
            if (strcmp(base, e->valuestring)) {
                rc = err_set(KITE_E_FORMAT, "%s: weight_map puts tensor '%s' in %s but it is in %s", index_path,
                             nm, sh, base);
                goto fail;
            }
        }
        if (n_map != m->n) {
            rc = err_set(KITE_E_FORMAT, "%s: weight_map lists %zu tensors but the shards hold %zu", index_path, n_map, m->n);
            goto fail;
        }
    }
    cJSON_Delete(root);
    free(text);
    free(index_path);
    *out = m;
    return KITE_OK;
fail:
    cJSON_Delete(root);
    free(text);
    free(index_path);
    st_model_free(m);
    return rc;
}

size_t st_model_n_tensors(const st_model *m) { return m->n; }
const st_tensor *st_model_tensor(const st_model *m, size_t i) { return i < m->n ? m->index[i] : NULL; }

const st_tensor *st_model_find(const st_model *m, const char *name) {
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->index[mid]->name, name);
        if (c == 0) return m->index[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
