/*
 * offload.c - resident-weight budget: arena for what fits, an I/O thread that
 * streams the other layers through a ring of aligned slots (offload.h,
 * docs/offload.md).
 */
#define _GNU_SOURCE /* O_DIRECT */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "model/offload.h"

#define IO_ALIGN 4096u        /* O_DIRECT: buffer, file offset and length alignment */
#define ARENA_ALIGN 64u       /* resident tensors keep at least a cache line's alignment */
#define RUN_GAP (256u << 10)  /* tensors this close are read as one run (the norms between them); not tuned */
#define N_MATS 11
#define MAX_IO 2              /* I/O workers: one per slot */

enum { SLOT_FREE = 0, SLOT_FILLING = 1, SLOT_READY = 2 };

typedef struct io_run {
    uint64_t off, len; /* aligned file range */
    uint64_t buf_off;  /* where it lands in the slot */
} io_run;

typedef struct stream_layer {
    uint64_t lo; /* file offset of slot byte 0 */
    io_run *runs;
    int n_runs;
} stream_layer;

/* One I/O worker: a thread that reads a streamed layer into its slot and
 * repacks its matrices there as the loader repacks resident ones. */
typedef struct io_worker {
    struct offload *o;
    pthread_t thread;
    bool started;
    int fd;                  /* O_DIRECT when direct */
    bool direct;             /* its own copy of plan.direct (copied under mu) */
    uint8_t *scratch;        /* model_repack_layer's scratch */
    size_t scratch_bytes;
    char err[320];           /* its message, copied to offload.err under mu */
} io_worker;

struct offload {
    kite_model *m;
    offload_plan plan;
    uint8_t *arena;
    uint8_t *ring;           /* n_slots * slot_bytes, IO_ALIGN-aligned */
    layer_weights *slot_L;   /* [n_slots] the views of the layer in each slot */
    int32_t *slot_layer;     /* [n_slots] */
    int *slot_state;         /* [n_slots] SLOT_* */
    uint64_t *slot_turn;     /* [n_slots] the k (streamed-layer count) slot s takes next: s, s + n_slots, ... */
    stream_layer *sl;        /* [n_layer - n_resident] */
    io_worker io[MAX_IO];    /* n_io of them, one per slot */
    int n_io;
    uint64_t next_k;         /* the next streamed layer (a count over passes) a worker takes, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t pass_mu;
    bool stop, failed;
    uint64_t use_k;          /* streamed layers consumed so far */
    uint64_t bytes_read, n_passes;
    char err[320];           /* the first error (under mu) */
};

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static void fmt_size(char *buf, size_t n, uint64_t b) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.1f MiB", (double)b / (double)(1ull << 20));
    else snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
}

int offload_probe_disk(const char *path, uint64_t max_bytes, double *gbs, bool *direct) {
    const size_t chunk = 4u << 20;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    *direct = fd >= 0;
    if (fd < 0 && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return err_set(KITE_E_IO, "%s: %s", path, strerror(errno));
    void *buf = NULL;
    if (posix_memalign(&buf, IO_ALIGN, chunk)) {
        close(fd);
        return err_set(KITE_E_NOMEM, "out of memory for the disk probe");
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t got = 0;
    while (got < max_bytes) {
        ssize_t r = pread(fd, buf, chunk, (off_t)got);
        if (r < 0 && errno == EINVAL && *direct) { /* O_DIRECT refused at read time: buffered */
            close(fd);
            *direct = false;
            if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) break;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (uint64_t)r;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (fd >= 0) close(fd);
    free(buf);
    const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (got == 0 || s <= 0) return err_set(KITE_E_IO, "%s: the disk probe read nothing", path);
    *gbs = (double)got / s / 1e9;
    return KITE_OK;
}

uint64_t offload_proc_read_bytes(void) {
    FILE *f = fopen("/proc/self/io", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long v = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "read_bytes: %llu", &v) == 1) break;
    fclose(f);
    return v;
}

int offload_parse_size(const char *text, uint64_t *out) {
    if (!text || !*text) return err_set(KITE_E_ARG, "empty size (expected e.g. 512M, 1.5G, 65536)");
    char *end = NULL;
    errno = 0;
    const double v = strtod(text, &end);
    if (end == text || errno || !isfinite(v) || v <= 0.0 || isspace((unsigned char)*text))
        return err_set(KITE_E_ARG, "'%s' is not a size > 0 (expected e.g. 512M, 1.5G, 65536)", text);
    double mul = 1.0;
    const char c = (char)tolower((unsigned char)*end);
    if (c == 'k') mul = 1024.0;
    else if (c == 'm') mul = 1048576.0;
    else if (c == 'g') mul = 1073741824.0;
    else if (c == 't') mul = 1099511627776.0;
    if (mul > 1.0) {
        end++;
        if (tolower((unsigned char)*end) == 'i') end++;
        if (tolower((unsigned char)*end) == 'b') end++;
    } else if (tolower((unsigned char)*end) == 'b') {
        end++;
    }
    if (*end) return err_set(KITE_E_ARG, "'%s' is not a size (suffixes: K, M, G, T; e.g. 512M)", text);
    const double b = v * mul;
    if (b < 1.0 || b > 1.8e19) return err_set(KITE_E_ARG, "size '%s' is out of range", text);
    *out = (uint64_t)b;
    return KITE_OK;
}

/* The matrix views of a layer (absent ones have data NULL). */
static int layer_mats(layer_weights *L, weight **w) {
    weight *v[N_MATS] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                         &L->gate_inp, &L->gate_exps, &L->up_exps, &L->down_exps};
    memcpy(w, v, sizeof v);
    return N_MATS;
}

/* The tensor whose data holds p. */
static const gguf_tensor *tensor_of(const gguf_ctx *g, const void *p) {
    const uint8_t *q = p;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const uint8_t *d = t->data;
        if (q >= d && q < d + (t->nbytes ? t->nbytes : 1)) return t;
    }
    return NULL;
}

/* Adds t to set[0..*n) unless present. */
static void add_unique(const gguf_tensor **set, int *n, const gguf_tensor *t) {
    for (int i = 0; i < *n; i++)
        if (set[i] == t) return;
    set[(*n)++] = t;
}

/* The distinct tensors behind layer l's matrices (at most N_MATS). */
static int layer_tensors(kite_model *m, int32_t l, const gguf_tensor **set) {
    weight *w[N_MATS];
    int n = 0;
    layer_mats(&m->layers[l], w);
    for (int i = 0; i < N_MATS; i++)
        if (w[i]->data) {
            const gguf_tensor *t = tensor_of(m->gguf, w[i]->data);
            if (t) add_unique(set, &n, t);
        }
    return n;
}

static int cmp_tensor_off(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The scratch one worker needs for layer l (model_repack_layer's). */
static size_t layer_scratch(const kite_model *m, int32_t l) {
    return m->repack_streamed ? model_repack_layer_tmp(&m->layers[l]) : 0;
}

/* Runs of layer l's file range; returns the slot bytes it needs, 0 on OOM. */
static uint64_t plan_runs(kite_model *m, int32_t l, stream_layer *out) {
    const gguf_tensor *set[N_MATS];
    const int n = layer_tensors(m, l, set);
    qsort(set, (size_t)n, sizeof *set, cmp_tensor_off);
    io_run runs[N_MATS];
    int nr = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t a = m->gguf->data_offset + set[i]->offset;
        const uint64_t s = a / IO_ALIGN * IO_ALIGN, e = align_up(a + set[i]->nbytes, IO_ALIGN);
        if (nr > 0 && s <= runs[nr - 1].off + runs[nr - 1].len + RUN_GAP) {
            if (e > runs[nr - 1].off + runs[nr - 1].len) runs[nr - 1].len = e - runs[nr - 1].off;
        } else {
            runs[nr++] = (io_run){.off = s, .len = e - s};
        }
    }
    if (nr == 0) return IO_ALIGN;
    out->lo = runs[0].off;
    for (int i = 0; i < nr; i++) runs[i].buf_off = runs[i].off - out->lo;
    out->runs = malloc(sizeof(io_run) * (size_t)nr);
    if (!out->runs) return 0;
    memcpy(out->runs, runs, sizeof(io_run) * (size_t)nr);
    out->n_runs = nr;
    return runs[nr - 1].buf_off + runs[nr - 1].len;
}

/* pread all of [off, off + len) into buf; a short read that ends at the end
 * of the file is complete (the aligned tail past EOF).  Returns 0 or errno. */
static int read_full(int fd, uint8_t *buf, uint64_t off, uint64_t len, uint64_t file_size, uint64_t *got_total) {
    uint64_t got = 0;
    while (got < len) {
        const ssize_t r = pread(fd, buf + got, (size_t)(len - got), (off_t)(off + got));
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (r == 0) {
            if (off + got >= file_size) break;
            return EIO;
        }
        got += (uint64_t)r;
        *got_total += (uint64_t)r;
    }
    return 0;
}

/* A worker's aligned read of [off, off + len) for layer l into buf, falling
 * back to buffered reads when the file system refuses O_DIRECT. */
static int worker_read(io_worker *w, uint8_t *buf, uint64_t off, uint64_t len, int32_t l, uint64_t *nread) {
    const kite_model *m = w->o->m;
    int e = read_full(w->fd, buf, off, len, m->gguf->size, nread);
    if (e == EINVAL && w->direct) { /* the file system refused O_DIRECT here: buffered from now on */
        const int fd = open(m->path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            close(w->fd);
            w->fd = fd;
            w->direct = false;
            e = read_full(w->fd, buf, off, len, m->gguf->size, nread);
        }
    }
    if (e) {
        snprintf(w->err, sizeof w->err, "%s: reading layer %d (bytes %llu..%llu) failed: %s", m->path, l,
                 (unsigned long long)off, (unsigned long long)(off + len), strerror(e));
        return KITE_E_IO;
    }
    return KITE_OK;
}

/* Reads streamed layer l into slot s and binds the slot's views to it. */
static int load_slot(offload *o, io_worker *w, int s, int32_t l, uint64_t *nread) {
    kite_model *m = o->m;
    const stream_layer *sl = &o->sl[l - o->plan.n_resident];
    uint8_t *buf = o->ring + (size_t)s * o->plan.slot_bytes;
    for (int i = 0; i < sl->n_runs; i++) {
        const io_run *r = &sl->runs[i];
        const int rc = worker_read(w, buf + r->buf_off, r->off, r->len, l, nread);
        if (rc) return rc;
    }
    layer_weights *L = &o->slot_L[s];
    *L = m->layers[l];
    weight *v[N_MATS];
    layer_mats(L, v);
    for (int i = 0; i < N_MATS; i++)
        if (v[i]->data) {
            const uint64_t at = (uint64_t)((const uint8_t *)v[i]->data - m->gguf->base);
            v[i]->data = buf + (at - sl->lo);
        }
    const int n_exp = m->hp.n_expert > 0 ? m->hp.n_expert : 1;
    if (m->f16_as_bf16) (void)model_layer_to_bf16(L, n_exp);
    if (m->repack_streamed) model_repack_layer(L, n_exp, w->scratch, w->scratch_bytes);
    return KITE_OK;
}

/* A worker takes the streamed layers in turn with the others (next_k), each
 * into its slot k % n_slots once the pass before has handed it back.  With
 * one worker per slot, one repacks while the other reads: with a single
 * thread, reading and repacking added up (BENCHMARKS.md, offloading). */
static void *io_main(void *arg) {
    io_worker *w = arg;
    offload *o = w->o;
    const int32_t n_stream = o->m->hp.n_layer - o->plan.n_resident;
    pthread_mutex_lock(&o->mu);
    while (!o->stop && !o->failed) {
        const uint64_t k = o->next_k++;
        const int s = (int)(k % (uint64_t)o->plan.n_slots);
        /* its turn, not just a free slot: a worker that took k + n_slots later must not fill the slot
         * first when the one holding k has not woken yet */
        while (!o->stop && (o->slot_state[s] != SLOT_FREE || o->slot_turn[s] != k)) pthread_cond_wait(&o->cv, &o->mu);
        if (o->stop) break;
        o->slot_state[s] = SLOT_FILLING;
        o->slot_turn[s] = k + (uint64_t)o->plan.n_slots;
        pthread_mutex_unlock(&o->mu);
        const int32_t l = o->plan.n_resident + (int32_t)(k % (uint64_t)n_stream);
        uint64_t nread = 0;
        const int rc = load_slot(o, w, s, l, &nread);
        pthread_mutex_lock(&o->mu);
        o->bytes_read += nread;
        if (!w->direct) o->plan.direct = false;
        o->slot_layer[s] = l;
        o->slot_state[s] = SLOT_READY;
        if (rc && !o->failed) {
            memcpy(o->err, w->err, sizeof o->err);
            o->failed = true;
        }
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

void offload_free(offload *o) {
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    o->stop = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    for (int i = 0; i < MAX_IO; i++) {
        if (o->io[i].started) pthread_join(o->io[i].thread, NULL);
        if (o->io[i].fd >= 0) close(o->io[i].fd);
        free(o->io[i].scratch);
    }
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->pass_mu);
    if (o->sl)
        for (int32_t i = 0; i < o->m->hp.n_layer - o->plan.n_resident; i++) free(o->sl[i].runs);
    free(o->sl);
    free(o->arena);
    free(o->ring);
    free(o->slot_L);
    free(o->slot_layer);
    free(o->slot_state);
    free(o->slot_turn);
    free(o);
}

const offload_plan *offload_get_plan(const offload *o) { return &o->plan; }

/* Copies the resident tensors set[0..n) into the arena at *at and rebinds
 * every view in views[0..nv) that points into one of them. */
static int copy_resident(offload *o, int fd, const gguf_tensor *const *set, int n, weight **views, int nv,
                         uint64_t *at) {
    kite_model *m = o->m;
    for (int i = 0; i < n; i++) {
        const gguf_tensor *t = set[i];
        uint8_t *dst = o->arena + *at;
        uint64_t got = 0;
        const int e = read_full(fd, dst, m->gguf->data_offset + t->offset, t->nbytes, m->gguf->size, &got);
        if (e || got != t->nbytes)
            return err_set(KITE_E_IO, "%s: reading tensor '%.*s' failed: %s", m->path, (int)t->name.len,
                           t->name.ptr, e ? strerror(e) : "short read");
        const uint8_t *src = t->data;
        for (int v = 0; v < nv; v++) {
            const uint8_t *p = views[v]->data;
            if (p && p >= src && p < src + (t->nbytes ? t->nbytes : 1)) views[v]->data = dst + (p - src);
        }
        *at += align_up(t->nbytes, ARENA_ALIGN);
    }
    return KITE_OK;
}

int offload_setup(kite_model *m, uint64_t budget) {
    const int32_t NL = m->hp.n_layer;
    offload *o = calloc(1, sizeof *o);
    if (!o) return err_set(KITE_E_NOMEM, "%s: out of memory", m->path);
    o->m = m;
    for (int i = 0; i < MAX_IO; i++) o->io[i].fd = -1;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    pthread_mutex_init(&o->pass_mu, NULL);
    m->offload = o;
    o->plan.budget = budget;

    /* always resident: the global matrices and the float vectors */
    const gguf_tensor *glob[3];
    int ng = 0;
    weight *gviews[3] = {&m->tok_embd, &m->output, &m->pos_embd};
    for (int i = 0; i < 3; i++)
        if (gviews[i]->data) {
            const gguf_tensor *t = tensor_of(m->gguf, gviews[i]->data);
            if (t) add_unique(glob, &ng, t);
        }
    uint64_t always = m->n_vector_bytes;
    for (int i = 0; i < ng; i++) always += align_up(glob[i]->nbytes, ARENA_ALIGN);
    /* per layer: its resident cost, and the slot it would need streamed */
    uint64_t *lbytes = calloc((size_t)NL, sizeof *lbytes), all = always, slot = 0;
    if (!lbytes) return err_set(KITE_E_NOMEM, "%s: out of memory", m->path);
    size_t scratch = 0; /* one worker's, over every layer that may be streamed */
    for (int32_t l = 0; l < NL; l++) {
        const gguf_tensor *set[N_MATS];
        const int n = layer_tensors(m, l, set);
        uint64_t lo = UINT64_MAX, hi = 0;
        for (int i = 0; i < n; i++) {
            lbytes[l] += align_up(set[i]->nbytes, ARENA_ALIGN);
            const uint64_t a = m->gguf->data_offset + set[i]->offset;
            if (a / IO_ALIGN * IO_ALIGN < lo) lo = a / IO_ALIGN * IO_ALIGN;
            if (align_up(a + set[i]->nbytes, IO_ALIGN) > hi) hi = align_up(a + set[i]->nbytes, IO_ALIGN);
        }
        if (hi > lo && hi - lo > slot) slot = hi - lo;
        all += lbytes[l];
        const size_t t = layer_scratch(m, l);
        if (t > scratch) scratch = t;
    }
    slot = align_up(slot ? slot : IO_ALIGN, IO_ALIGN);
    o->plan.always = always;
    o->plan.slot_bytes = slot;
    int rc = KITE_OK;
    if (all <= budget) {
        o->plan.n_resident = NL;
    } else {
        always += scratch;
        o->plan.always = always;
        if (always + slot > budget) {
            char b[32], mn[32], a[32], s[32];
            fmt_size(b, sizeof b, budget);
            fmt_size(mn, sizeof mn, always + slot);
            fmt_size(a, sizeof a, always);
            fmt_size(s, sizeof s, slot);
            free(lbytes);
            return err_set(KITE_E_ARG,
                           "memory budget %s is too small for %s: the minimum is %s (%llu bytes: %s always resident "
                           "- embeddings, classifier, norms - plus %s (%llu bytes) for one streamed layer)",
                           b, m->path, mn, (unsigned long long)(always + slot), a, s, (unsigned long long)slot);
        }
        o->plan.n_slots = always + 2 * slot <= budget ? 2 : 1;
        uint64_t left = budget - always - (uint64_t)o->plan.n_slots * slot;
        /* two slots: a second worker (its scratch) before any resident layer.  It overlaps one layer's
         * packing with the next one's read on every streamed layer, where a resident layer saves one
         * layer's read and pack per token (BENCHMARKS.md, offloading) */
        o->n_io = 1;
        if (o->plan.n_slots == 2 && left >= scratch) {
            o->n_io = 2;
            left -= scratch;
        }
        int32_t nr = 0;
        while (nr < NL - 1 && lbytes[nr] <= left) left -= lbytes[nr++];
        o->plan.n_resident = nr;
    }
    uint64_t arena_bytes = 0;
    for (int i = 0; i < ng; i++) arena_bytes += align_up(glob[i]->nbytes, ARENA_ALIGN);
    for (int32_t l = 0; l < o->plan.n_resident; l++) arena_bytes += lbytes[l];
    o->plan.resident = m->n_vector_bytes + arena_bytes + (uint64_t)o->plan.n_slots * slot + (uint64_t)o->n_io * scratch;
    free(lbytes);

    if (posix_memalign((void **)&o->arena, 4096, arena_bytes ? (size_t)arena_bytes : 1))
        return o->arena = NULL, err_set(KITE_E_NOMEM, "%s: out of memory for %llu resident bytes", m->path,
                                        (unsigned long long)arena_bytes);
    const int fd = open(m->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(KITE_E_IO, "%s: %s", m->path, strerror(errno));
    uint64_t at = 0;
    rc = copy_resident(o, fd, glob, ng, gviews, 3, &at);
    for (int32_t l = 0; l < o->plan.n_resident && !rc; l++) {
        const gguf_tensor *set[N_MATS];
        const int n = layer_tensors(m, l, set);
        weight *w[N_MATS];
        layer_mats(&m->layers[l], w);
        rc = copy_resident(o, fd, set, n, w, N_MATS, &at);
    }
    close(fd);
    if (rc) return rc;
    /* the loader read the norms through the mapping: drop those pages, the arena has what stays */
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), d0 = align_up(m->gguf->data_offset, pg);
    if (m->gguf->size > d0 && strcmp(gguf_residency(m->gguf), "mmap") == 0)
        (void)madvise((void *)(uintptr_t)(m->gguf->base + d0), (size_t)(m->gguf->size - d0), MADV_DONTNEED);
    if (o->plan.n_slots == 0) return KITE_OK;

    const int32_t n_stream = NL - o->plan.n_resident;
    o->sl = calloc((size_t)n_stream, sizeof *o->sl);
    o->slot_L = calloc((size_t)o->plan.n_slots, sizeof *o->slot_L);
    o->slot_layer = calloc((size_t)o->plan.n_slots, sizeof *o->slot_layer);
    o->slot_state = calloc((size_t)o->plan.n_slots, sizeof *o->slot_state);
    o->slot_turn = calloc((size_t)o->plan.n_slots, sizeof *o->slot_turn);
    for (int32_t i = 0; o->slot_turn && i < o->plan.n_slots; i++) o->slot_turn[i] = (uint64_t)i;
    bool scratch_ok = true;
    for (int i = 0; i < o->n_io; i++) {
        o->io[i].o = o;
        o->io[i].scratch_bytes = scratch;
        if (posix_memalign((void **)&o->io[i].scratch, IO_ALIGN, scratch ? scratch : 1))
            o->io[i].scratch = NULL, scratch_ok = false;
    }
    if (!o->sl || !o->slot_L || !o->slot_layer || !o->slot_state || !o->slot_turn || !scratch_ok ||
        posix_memalign((void **)&o->ring, IO_ALIGN, (size_t)(o->plan.n_slots * slot)))
        return o->ring = NULL, err_set(KITE_E_NOMEM, "%s: out of memory for the streaming ring", m->path);
    for (int32_t i = 0; i < n_stream; i++) {
        if (plan_runs(m, o->plan.n_resident + i, &o->sl[i]) == 0)
            return err_set(KITE_E_NOMEM, "%s: out of memory", m->path);
        for (int r = 0; r < o->sl[i].n_runs; r++) o->plan.stream_bytes += o->sl[i].runs[r].len;
    }
    o->plan.direct = 1;
    for (int i = 0; i < o->n_io; i++) {
        io_worker *w = &o->io[i];
        w->fd = open(m->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        w->direct = w->fd >= 0;
        if (!w->direct) o->plan.direct = 0;
        if (w->fd < 0 && (w->fd = open(m->path, O_RDONLY | O_CLOEXEC)) < 0)
            return err_set(KITE_E_IO, "%s: %s", m->path, strerror(errno));
    }
    for (int i = 0; i < o->n_io; i++) {
        if (pthread_create(&o->io[i].thread, NULL, io_main, &o->io[i]) != 0)
            return err_set(KITE_E_NOMEM, "%s: cannot start the streaming thread", m->path);
        o->io[i].started = true;
    }
    return KITE_OK;
}

void offload_pass_begin(offload *o) { pthread_mutex_lock(&o->pass_mu); }
void offload_pass_end(offload *o) {
    pthread_mutex_lock(&o->mu);
    o->n_passes++;
    pthread_mutex_unlock(&o->mu);
    pthread_mutex_unlock(&o->pass_mu);
}

const layer_weights *offload_layer(offload *o, int32_t l) {
    if (l < o->plan.n_resident) return &o->m->layers[l];
    const int s = (int)(o->use_k % (uint64_t)o->plan.n_slots);
    pthread_mutex_lock(&o->mu);
    while (o->slot_state[s] != SLOT_READY && !o->failed) pthread_cond_wait(&o->cv, &o->mu);
    const bool ok = o->slot_state[s] == SLOT_READY && o->slot_layer[s] == l && !o->failed;
    if (!ok && !o->failed) { /* a pass took the layers out of order: a bug, not an input error */
        snprintf(o->err, sizeof o->err, "%s: streamed layer %d taken out of order", o->m->path, l);
        o->failed = true;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return ok ? &o->slot_L[s] : NULL;
}

void offload_done(offload *o, int32_t l) {
    if (l < o->plan.n_resident) return;
    const int s = (int)(o->use_k % (uint64_t)o->plan.n_slots);
    pthread_mutex_lock(&o->mu);
    o->slot_state[s] = SLOT_FREE;
    o->use_k++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

const char *offload_error(const offload *o) {
    if (!o) return NULL;
    pthread_mutex_lock((pthread_mutex_t *)&o->mu);
    const char *e = o->failed ? o->err : NULL;
    pthread_mutex_unlock((pthread_mutex_t *)&o->mu);
    return e;
}

void kite_model_offload_stats(const kite_model *m, kite_offload_stats *st) {
    memset(st, 0, sizeof *st);
    offload *o = m ? m->offload : NULL;
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    st->bytes_read = o->bytes_read;
    st->n_passes = o->n_passes;
    st->direct = o->plan.direct != 0;
    pthread_mutex_unlock(&o->mu);
}
