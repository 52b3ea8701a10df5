/*
 * offload.h - a bound on resident weight memory (kite_model_params.mem_budget,
 * `--mem-budget`): the layers that do not fit stay on disk and are streamed in,
 * layer by layer, by I/O workers (threads, one per slot) that read ahead of compute.
 *
 * DESIGN (docs/offload.md)
 *   With a budget the loader maps the file (the mapping is only read for the
 *   header and the 1-D vectors the loader converts to float; its data pages are
 *   dropped again with MADV_DONTNEED), then offload_setup copies what stays
 *   resident into one owned arena with pread: the token embedding, the
 *   classifier, learned positions, and then whole layers from layer 0 up while
 *   they fit, after a ring of slots (two when the budget allows, else one) is
 *   set aside for the rest.  A streamed layer's slot holds the file range that
 *   covers its matrices; an I/O worker preads it (O_DIRECT when the file
 *   system takes it, buffered pread otherwise), repacks its matrices exactly as
 *   the loader repacks resident ones (model_repack_matrix's layout choice) and
 *   marks it ready, so outputs are bit-identical to an unbounded run.  The
 *   workers walk the streamed layers cyclically, taking them in turn (a pass reads them in order,
 *   the next pass starts again at the first), so reading layer i+1 overlaps
 *   computing layer i, and the first streamed layer of the next token is read
 *   while the resident layers and the head run.
 *
 *   The model is shared by contexts: a pass holds the offloader's lock from
 *   its first layer to its last (offload_pass_begin / _end), so two contexts
 *   take turns, each seeing the streamed layers in order.
 */
#ifndef KITE_MODEL_OFFLOAD_H
#define KITE_MODEL_OFFLOAD_H

#include <stdint.h>

#include "model/model.h"

typedef struct offload offload;

/* Sizes of a plan, for messages and kite info/bench. */
typedef struct offload_plan {
    uint64_t budget;        /* bytes asked for */
    uint64_t always;        /* always resident: embeddings, classifier, float vectors */
    uint64_t slot_bytes;    /* one ring slot (the largest streamed layer's file range) */
    int32_t n_slots;        /* 0: everything resident, nothing streamed */
    int32_t n_resident;     /* layers 0..n_resident-1 are resident */
    uint64_t resident;      /* bytes held: always + resident layers + ring */
    uint64_t stream_bytes;  /* bytes read per pass: the runs of every streamed layer */
    int direct;             /* the I/O workers read with O_DIRECT */
} offload_plan;

/* Plans and sets up the budget for a model whose gguf is a file mapping and
 * whose weights are bound (loader.c, after bind_weights): copies the resident
 * tensors into the arena and rebinds them, starts the I/O workers for the rest.
 * Too small a budget: KITE_E_ARG with the minimum.  Stores m->offload. */
int offload_setup(kite_model *m, uint64_t budget);
void offload_free(offload *o);
/* The plan in force (m->offload non-NULL). */
const offload_plan *offload_get_plan(const offload *o);

/* A forward pass's use: begin takes the lock; layer(l) returns layer l's
 * weights (resident: m->layers[l]; streamed: the slot's view, waiting for the
 * I/O workers), done(l) hands a streamed layer's slot back; end releases the
 * lock.  Every streamed layer must be taken and handed back once per pass, in
 * order (a skipped layer too).  Returns NULL from layer() after a read error
 * (offload_error says which): the caller computes nothing more. */
void offload_pass_begin(offload *o);
const layer_weights *offload_layer(offload *o, int32_t l);
void offload_done(offload *o, int32_t l);
void offload_pass_end(offload *o);
/* The first read error (a message), or NULL. */
const char *offload_error(const offload *o);


/* Storage read bandwidth: sequential reads of up to max_bytes of path in
 * 4 MiB requests, with O_DIRECT where the file system takes it (*direct says
 * whether it did; without it the figure may be page-cache speed).  Returns
 * KITE_OK with *gbs (GB/s), or KITE_E_IO. */
int offload_probe_disk(const char *path, uint64_t max_bytes, double *gbs, bool *direct);

/* This process's bytes fetched from storage so far (/proc/self/io read_bytes:
 * page-cache hits are not counted); 0 where the file is unreadable. */
uint64_t offload_proc_read_bytes(void);

/* Parses "512M", "1.5G", "4096", "64k" (binary multiples, case-insensitive,
 * optional "iB"/"B") into bytes > 0.  Returns KITE_OK or KITE_E_ARG with a
 * message naming the text. */
int offload_parse_size(const char *text, uint64_t *out);

#endif
