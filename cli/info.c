/*
 * info.c - `kite info FILE [--no-tensors]`: print a GGUF file's header,
 * metadata and tensor table.
 *
 * Uses only the internal GGUF reader (which validates the whole file at open)
 * and the dtype traits.  Long arrays are abbreviated to their first few
 * elements and long strings to their first bytes, so the output of a 128k
 * vocabulary stays one line per key.  Strings are printed in double quotes
 * with C-style escapes for quotes, backslashes and control bytes; other bytes
 * (UTF-8) are printed as they are.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "kite.h"
#include "tensor/dtype.h"

#define INFO_MAX_STR 80    /* bytes of a string value shown before "..." */
#define INFO_SHORT_ARRAY 8 /* arrays up to this length are shown whole */
#define INFO_ARRAY_HEAD 3  /* elements shown of longer arrays */

typedef struct info_opts {
    const char *path;
    bool no_tensors, hash;
} info_opts;

static int info_arg(void *state, const char *cmd, int argc, char **argv, int *i) {
    info_opts *o = state;
    (void)argc;
    if (cli_is_option(argv[*i])) return cli_usage_error(cmd, "unknown option '%s'", argv[*i]);
    if (o->path) return cli_usage_error(cmd, "more than one FILE given");
    o->path = argv[*i];
    return 0;
}

/* -m FILE: the same as the FILE positional (llama.cpp's tools take -m everywhere). */
static int info_model(const cli_opt *o, void *state, const char *cmd, const char *flag, char **vals, int n) {
    info_opts *io = state;
    (void)o, (void)flag, (void)n;
    if (io->path) return cli_usage_error(cmd, "more than one FILE given");
    io->path = vals[0];
    return 1;
}

static const cli_opt info_opts_table[] = {
    {.names = "-m, --model", .arg = "FILE", .help = "the file (the same as giving FILE)", .kind = CLI_FN, .nargs = 1,
     .fn = info_model, .example = "models/stories260K.gguf"},
    {.names = "--no-tensors", .help = "omit the tensor table (totals are still printed)", .kind = CLI_FLAG,
     CLI_AT(info_opts, no_tensors)},
    {.names = "--hash", .help = "instead of everything else: one line per tensor, \"FNV1A64 TYPE NAME\",\n"
                                "sorted by name (compares the tensors of two files, whatever the order\n"
                                "or the metadata, like llama.cpp's gguf-hash)",
     .kind = CLI_FLAG, CLI_AT(info_opts, hash)},
};

const cli_spec cli_spec_info = {
    .cmd = "info",
    .usage = "usage: kite info FILE [--no-tensors | --hash]\n"
             "       kite info -m FILE [--no-tensors | --hash]\n"
             "\n"
             "Validates a GGUF file and prints its version, counts, alignment, every\n"
             "metadata key with type and value, and the tensor table (name, type,\n"
             "shape, offset, bytes) with totals.\n",
    CLI_TABLE(info_opts_table, info_opts),
    .other = info_arg,
};

/* Prints s quoted and escaped, at most max bytes (cut at a UTF-8 boundary). */
static void print_str(gguf_str s, uint64_t max) {
    uint64_t n = s.len;
    bool cut = false;
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s.ptr[n] & 0xc0) == 0x80) n--; /* don't split a character */
        cut = true;
    }
    cli_json_string(stdout, s.ptr, (size_t)n);
    if (cut) printf("...(%" PRIu64 " bytes)", s.len);
}

/* Shortest %g form that reads back as the same value. */
static void print_double(double x, int max_digits) {
    char buf[40];
    for (int prec = 6; prec <= max_digits; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (max_digits <= 9 ? (float)strtod(buf, NULL) == (float)x : strtod(buf, NULL) == x) break;
    }
    fputs(buf, stdout);
}

/* Prints element i of a scalar array of type et. */
static void print_scalar_elem(uint32_t et, const void *data, uint64_t i) {
    gguf_value v = {.type = et};
    switch (et) {
    case GGUF_VT_UINT8: v.v.u8 = ((const uint8_t *)data)[i]; break;
    case GGUF_VT_INT8: v.v.i8 = ((const int8_t *)data)[i]; break;
    case GGUF_VT_UINT16: v.v.u16 = ((const uint16_t *)data)[i]; break;
    case GGUF_VT_INT16: v.v.i16 = ((const int16_t *)data)[i]; break;
    case GGUF_VT_UINT32: v.v.u32 = ((const uint32_t *)data)[i]; break;
    case GGUF_VT_INT32: v.v.i32 = ((const int32_t *)data)[i]; break;
    case GGUF_VT_FLOAT32: v.v.f32 = ((const float *)data)[i]; break;
    case GGUF_VT_BOOL: v.v.b = ((const uint8_t *)data)[i] != 0; break;
    case GGUF_VT_UINT64: v.v.u64 = ((const uint64_t *)data)[i]; break;
    case GGUF_VT_INT64: v.v.i64 = ((const int64_t *)data)[i]; break;
    case GGUF_VT_FLOAT64: v.v.f64 = ((const double *)data)[i]; break;
    default: return;
    }
    switch (et) {
    case GGUF_VT_UINT8: printf("%u", v.v.u8); break;
    case GGUF_VT_INT8: printf("%d", v.v.i8); break;
    case GGUF_VT_UINT16: printf("%u", v.v.u16); break;
    case GGUF_VT_INT16: printf("%d", v.v.i16); break;
    case GGUF_VT_UINT32: printf("%" PRIu32, v.v.u32); break;
    case GGUF_VT_INT32: printf("%" PRId32, v.v.i32); break;
    case GGUF_VT_FLOAT32: print_double(v.v.f32, 9); break;
    case GGUF_VT_BOOL: fputs(v.v.b ? "true" : "false", stdout); break;
    case GGUF_VT_UINT64: printf("%" PRIu64, v.v.u64); break;
    case GGUF_VT_INT64: printf("%" PRId64, v.v.i64); break;
    case GGUF_VT_FLOAT64: print_double(v.v.f64, 17); break;
    default: break;
    }
}

static void print_value(const gguf_value *v);

static void print_array(const gguf_array *a) {
    const char *tn = gguf_vtype_name(a->elem_type);
    if (a->elem_type == GGUF_VT_STRING)
        tn = a->n == 1 ? "string" : "strings";
    else if (a->elem_type == GGUF_VT_ARRAY)
        tn = a->n == 1 ? "array" : "arrays";
    printf("[%" PRIu64 " %s", a->n, tn);
    uint64_t shown = a->n <= INFO_SHORT_ARRAY ? a->n : INFO_ARRAY_HEAD;
    if (a->n) fputs(": ", stdout);
    for (uint64_t i = 0; i < shown; i++) {
        if (i) fputs(", ", stdout);
        if (a->elem_type == GGUF_VT_STRING)
            print_str(((const gguf_str *)a->data)[i], INFO_MAX_STR);
        else if (a->elem_type == GGUF_VT_ARRAY)
            print_value(&((const gguf_value *)a->data)[i]);
        else
            print_scalar_elem(a->elem_type, a->data, i);
    }
    if (shown < a->n) fputs(", ...", stdout);
    putchar(']');
}

static void print_value(const gguf_value *v) {
    switch (v->type) {
    case GGUF_VT_UINT8: printf("%u", v->v.u8); break;
    case GGUF_VT_INT8: printf("%d", v->v.i8); break;
    case GGUF_VT_UINT16: printf("%u", v->v.u16); break;
    case GGUF_VT_INT16: printf("%d", v->v.i16); break;
    case GGUF_VT_UINT32: printf("%" PRIu32, v->v.u32); break;
    case GGUF_VT_INT32: printf("%" PRId32, v->v.i32); break;
    case GGUF_VT_FLOAT32: print_double(v->v.f32, 9); break;
    case GGUF_VT_BOOL: fputs(v->v.b ? "true" : "false", stdout); break;
    case GGUF_VT_UINT64: printf("%" PRIu64, v->v.u64); break;
    case GGUF_VT_INT64: printf("%" PRId64, v->v.i64); break;
    case GGUF_VT_FLOAT64: print_double(v->v.f64, 17); break;
    case GGUF_VT_STRING: print_str(v->v.str, INFO_MAX_STR); break;
    case GGUF_VT_ARRAY: print_array(&v->v.arr); break;
    default: fputs("?", stdout); break;
    }
}

static void print_tensor(uint64_t i, const gguf_tensor *t, int name_w) {
    char shape[128];
    int n = snprintf(shape, sizeof shape, "[");
    for (uint32_t d = 0; d < t->n_dims && n > 0 && (size_t)n < sizeof shape; d++)
        n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    if (n > 0 && (size_t)n < sizeof shape) snprintf(shape + n, sizeof shape - (size_t)n, "]");
    printf("  %5" PRIu64 "  %-*.*s  %-7s  %-22s  %12" PRIu64 "  %12" PRIu64 "\n", i, name_w, (int)(t->name.len > 4096 ? 4096 : t->name.len),
           t->name.ptr, dtype_name(t->type), shape, t->offset, t->nbytes);
}

/* 64-bit FNV-1a of a tensor's data: enough to tell two tensors apart in a test or a review. */
static uint64_t fnv1a64(const uint8_t *p, uint64_t n) {
    uint64_t h = UINT64_C(14695981039346656037);
    for (uint64_t i = 0; i < n; i++) h = (h ^ p[i]) * UINT64_C(1099511628211);
    return h;
}

static const gguf_ctx *g_sort_ctx;
static int by_name(const void *a, const void *b) {
    const gguf_str x = g_sort_ctx->tensors[*(const uint64_t *)a].name, y = g_sort_ctx->tensors[*(const uint64_t *)b].name;
    const uint64_t n = x.len < y.len ? x.len : y.len;
    const int c = memcmp(x.ptr, y.ptr, (size_t)n);
    return c ? c : (x.len > y.len) - (x.len < y.len);
}

static int print_hashes(const gguf_ctx *g) {
    uint64_t *idx = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *idx);
    if (!idx) {
        fprintf(stderr, "kite info: out of memory\n");
        return 1;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) idx[i] = i;
    g_sort_ctx = g;
    qsort(idx, (size_t)g->n_tensors, sizeof *idx, by_name);
    for (uint64_t k = 0; k < g->n_tensors; k++) {
        const gguf_tensor *t = &g->tensors[idx[k]];
        printf("%016" PRIx64 "  %-7s  %.*s\n", fnv1a64(t->data, t->nbytes), dtype_name(t->type),
               (int)(t->name.len > 4096 ? 4096 : t->name.len), t->name.ptr);
    }
    free(idx);
    return 0;
}

int cmd_info(int argc, char **argv) {
    info_opts o = {0};
    int rc = cli_parse(&cli_spec_info, argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.path) return cli_usage_error("info", "missing FILE");
    const char *path = o.path;
    const bool tensors = !o.no_tensors;

    gguf_ctx *g = NULL;
    if (gguf_open(path, NULL, &g) != KITE_OK) {
        fprintf(stderr, "kite info: %s\n", kite_last_error());
        return 1;
    }
    if (o.hash) {
        rc = print_hashes(g);
        gguf_close(g);
        return rc;
    }
    printf("file:       %s\n", path);
    printf("version:    %" PRIu32 "\n", g->version);
    printf("size:       %" PRIu64 " bytes\n", g->size);
    printf("n_kv:       %" PRIu64 "\n", g->n_kv);
    printf("n_tensors:  %" PRIu64 "\n", g->n_tensors);
    printf("alignment:  %" PRIu64 "\n", g->alignment);
    printf("data:       offset %" PRIu64 "\n", g->data_offset);

    printf("\nmetadata:\n");
    int key_w = 0;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key.len > (uint64_t)key_w) key_w = g->kv[i].key.len > 48 ? 48 : (int)g->kv[i].key.len;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        printf("  %5" PRIu64 "  %-*.*s  %-7s  ", i, key_w, (int)(kv->key.len > 4096 ? 4096 : kv->key.len),
               kv->key.ptr, gguf_vtype_name(kv->value.type));
        print_value(&kv->value);
        putchar('\n');
    }

    uint64_t n_elem = 0, n_bytes = 0;
    int name_w = 4;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        n_elem += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]); /* checked at open */
        n_bytes += t->nbytes;
        if (t->name.len > (uint64_t)name_w) name_w = t->name.len > 64 ? 64 : (int)t->name.len;
    }
    if (tensors && g->n_tensors) {
        printf("\ntensors:\n  %5s  %-*s  %-7s  %-22s  %12s  %12s\n", "#", name_w, "name", "type", "shape", "offset",
               "bytes");
        for (uint64_t i = 0; i < g->n_tensors; i++) print_tensor(i, &g->tensors[i], name_w);
    }
    printf("\ntotal:      %" PRIu64 " tensors, %" PRIu64 " elements, %" PRIu64 " bytes of tensor data\n",
           g->n_tensors, n_elem, n_bytes);
    gguf_close(g);
    return 0;
}
