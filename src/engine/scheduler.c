/* scheduler.c - admission, batch building and preemption (see scheduler.h). */
#include "engine/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int sched_init(sched *s, kv_pool *kv, int32_t n_parallel, int32_t step_tokens, kv_copy_fn copy, void *copy_user) {
    memset(s, 0, sizeof *s);
    s->kv = kv;
    s->n_parallel = n_parallel;
    s->step_tokens = step_tokens < n_parallel ? n_parallel : step_tokens;
    s->copy = copy;
    s->copy_user = copy_user;
    s->running = calloc((size_t)n_parallel, sizeof *s->running);
    if (!s->running) return err_set(KITE_E_NOMEM, "scheduler: out of memory");
    return KITE_OK;
}

void sched_free(sched *s) {
    free(s->running);
    s->running = NULL;
}

static void queue_unlink(sched *s, sched_seq *q) {
    if (q->q_prev) q->q_prev->q_next = q->q_next; else s->wait_head = q->q_next;
    if (q->q_next) q->q_next->q_prev = q->q_prev; else s->wait_tail = q->q_prev;
    q->q_prev = q->q_next = NULL;
    s->n_wait--;
}

void sched_enqueue(sched *s, sched_seq *q) {
    /* the round after its client's last waiting sequence (or after vnow) */
    int64_t last = s->vnow;
    for (const sched_seq *w = s->wait_tail; w; w = w->q_prev)
        if (w->client == q->client) {
            if (w->round > last) last = w->round;
            break;
        }
    q->round = last + 1;
    /* after every waiting sequence of round <= q's: arrival order within a round */
    sched_seq *after = s->wait_tail;
    while (after && after->round > q->round) after = after->q_prev;
    q->q_prev = after;
    q->q_next = after ? after->q_next : s->wait_head;
    if (q->q_prev) q->q_prev->q_next = q; else s->wait_head = q;
    if (q->q_next) q->q_next->q_prev = q; else s->wait_tail = q;
    s->n_wait++;
}

static void queue_push_front(sched *s, sched_seq *q) {
    q->q_prev = NULL;
    q->q_next = s->wait_head;
    if (s->wait_head) s->wait_head->q_prev = q; else s->wait_tail = q;
    s->wait_head = q;
    s->n_wait++;
}

static void running_remove(sched *s, sched_seq *q) {
    int32_t i = 0;
    while (i < s->n_running && s->running[i] != q) i++;
    KITE_ASSERT(i < s->n_running);
    memmove(s->running + i, s->running + i + 1, (size_t)(s->n_running - i - 1) * sizeof *s->running);
    s->n_running--;
    q->running = false;
}

/* Recompute preemption: the sequence keeps its tokens, loses its K/V. */
static void preempt(sched *s, sched_seq *q) {
    running_remove(s, q);
    kv_release(s->kv, &q->kv);
    q->n_computed = 0;
    q->n_draft = 0; /* the engine drafts afresh once it decodes again */
    queue_push_front(s, q);
    s->preemptions++;
}

/* Blocks the running sequences other than `self` still need for the rest
 * of their pending runs (prompts being prefilled) beyond the blocks they
 * hold: reserved for them since their admission. */
static int32_t reserved(const sched *s, const sched_seq *self) {
    const int32_t bs = kv_pool_block_size(s->kv);
    int32_t r = 0;
    for (int32_t i = 0; i < s->n_running; i++) {
        const sched_seq *q = s->running[i];
        if (q == self || q->n_toks - q->n_computed <= 1) continue;
        const int32_t need = (q->n_toks + bs - 1) / bs - q->kv.n_blocks;
        if (need > 0) r += need;
    }
    return r;
}

/* Blocks q may take now: the pool's free and cached ones less the others' reservations. */
static int32_t avail_for(const sched *s, const sched_seq *q) { return kv_pool_available(s->kv) - reserved(s, q); }

/* Tries to admit the queue head; false if it does not fit now.  Its blocks
 * are reserved, not taken: each prefill chunk takes its own (so blocks of a
 * prompt not yet computed are neither held nor counted as used). */
static bool admit_head(sched *s) {
    sched_seq *q = s->wait_head;
    kv_pool *kv = s->kv;
    int32_t m = q->embed ? 0 : kv_match_prefix(kv, &q->kv, q->toks, q->n_toks - 1, q->n_path);
    if (m < 0) m = 0;
    const int32_t need = kv_write_cost(kv, &q->kv, m, q->n_toks - m);
    const int32_t avail = avail_for(s, NULL);
    /* keep one block of growth per running sequence, unless nothing runs */
    const bool fits = s->n_running == 0 ? need <= avail : need + s->n_running <= avail;
    if (!fits) {
        kv_release(kv, &q->kv); /* matched blocks go back to the cache */
        return false;
    }
    queue_unlink(s, q);
    if (q->round > s->vnow) s->vnow = q->round;
    q->n_computed = m;
    q->order = ++s->serial;
    q->running = true;
    s->running[s->n_running++] = q;
    if (!q->admitted_once) {
        q->admitted_once = true;
        q->n_cached = m;
        s->prefix_hit_tokens += m;
        s->tokens_in += q->n_prompt;
    }
    return true;
}

int32_t sched_plan(sched *s, sched_item *items) {
    /* admit only while this step's token budget is not yet spoken for, so
     * at most one admitted prompt waits for later steps with blocks it has
     * not filled (this keeps allocated-but-unused KV slots low) */
    int64_t committed = 0;
    for (int32_t i = 0; i < s->n_running; i++) committed += s->running[i]->n_toks - s->running[i]->n_computed;
    while (s->n_running < s->n_parallel && s->wait_head && committed < s->step_tokens && admit_head(s)) {
        const sched_seq *q = s->running[s->n_running - 1];
        committed += q->n_toks - q->n_computed;
    }
    kv_pool *kv = s->kv;
    int32_t n = 0, budget = s->step_tokens;

    /* decode: one token each, oldest first; preempt the newest for blocks */
    for (int32_t i = 0; i < s->n_running && budget > 0; i++) {
        sched_seq *q = s->running[i];
        if (q->n_toks - q->n_computed != 1) continue;
        bool dropped = false;
        while (kv_write_cost(kv, &q->kv, q->n_computed, 1) > avail_for(s, q)) {
            sched_seq *victim = s->running[s->n_running - 1];
            preempt(s, victim);
            if (victim == q) {
                dropped = true;
                break;
            }
        }
        if (dropped) break; /* q was the newest: nothing after it */
        if (kv_prepare_write(kv, &q->kv, q->n_computed, 1, s->copy, s->copy_user) != KITE_OK) continue;
        items[n++] = (sched_item){.seq = q, .n_tok = 1, .n_out = !q->embed, .prompt_path = q->n_computed < q->n_path};
        budget--;
    }

    /* drafts: extend decode items with their sequence's draft, with spare
     * budget and blocks only (the decode tokens above already have theirs) */
    const int32_t n_decode = n;
    for (int32_t i = 0; i < n_decode && budget > 0; i++) {
        sched_item *it = &items[i];
        sched_seq *q = it->seq;
        int32_t k = q->n_draft < budget ? q->n_draft : budget;
        if (k <= 0 || !q->draft || it->prompt_path) continue;
        while (k > 0 && kv_write_cost(kv, &q->kv, q->n_computed, 1 + k) > avail_for(s, q)) k--;
        if (k == 0 || kv_prepare_write(kv, &q->kv, q->n_computed, 1 + k, s->copy, s->copy_user) != KITE_OK) continue;
        it->n_tok = it->n_out = 1 + k;
        it->n_draft = k;
        budget -= k;
    }

    /* prefill: chunks of the remaining budget, oldest first */
    for (int32_t i = 0; i < s->n_running && budget > 0; i++) {
        sched_seq *q = s->running[i];
        const int32_t pend = q->n_toks - q->n_computed;
        if (pend <= 1) continue;
        int32_t take = pend < budget ? pend : budget;
        const bool on_path = q->n_computed < q->n_path;
        if (on_path && take > q->n_path - q->n_computed) take = q->n_path - q->n_computed; /* one path per item */
        if (kv_write_cost(kv, &q->kv, q->n_computed, take) > avail_for(s, q)) continue;
        if (kv_prepare_write(kv, &q->kv, q->n_computed, take, s->copy, s->copy_user) != KITE_OK) continue;
        items[n++] = (sched_item){.seq = q, .n_tok = take, .n_out = take == pend && !q->embed, .prompt_path = on_path};
        budget -= take;
    }
    return n;
}

/* Releases q's blocks that have left the window of every layer. */
static void drop_window(sched *s, sched_seq *q) {
    if (s->first_read) kv_drop_before(s->kv, &q->kv, s->first_read(s->first_read_user, q->n_computed));
}

void sched_advance(sched *s, const sched_item *items, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        sched_seq *q = items[i].seq;
        q->n_computed += items[i].n_tok - items[i].n_draft;
        kv_commit(s->kv, &q->kv, q->toks, q->n_computed, q->n_path);
        drop_window(s, q);
    }
}

void sched_keep_draft(sched *s, sched_seq *q, int32_t n_keep) {
    KITE_ASSERT(n_keep >= 0 && q->n_computed + n_keep <= q->n_toks);
    q->n_computed += n_keep;
    kv_truncate(s->kv, &q->kv, q->n_computed);
    kv_commit(s->kv, &q->kv, q->toks, q->n_computed, q->n_path);
    drop_window(s, q);
}

void sched_remove(sched *s, sched_seq *q) {
    if (q->running) {
        running_remove(s, q);
    } else if (q->q_prev || q->q_next || s->wait_head == q) {
        queue_unlink(s, q);
    }
    kv_release(s->kv, &q->kv);
    q->n_computed = 0;
}

bool sched_idle(const sched *s) { return s->n_running == 0 && s->wait_head == NULL; }

void sched_kv_usage(const sched *s, int32_t *scratch, int64_t *allocated, int64_t *used) {
    const int32_t bs = kv_pool_block_size(s->kv);
    int64_t a = 0, u = 0;
    /* a block shared by several sequences counts once, filled to its fullest */
    for (int32_t i = 0; i < s->n_running; i++) {
        const sched_seq *q = s->running[i];
        for (int32_t j = q->kv.n_dropped; j < q->kv.n_blocks; j++) scratch[q->kv.blocks[j]] = -1;
    }
    for (int32_t i = 0; i < s->n_running; i++) {
        const sched_seq *q = s->running[i];
        for (int32_t j = q->kv.n_dropped; j < q->kv.n_blocks; j++) {
            int32_t fill = q->n_computed - j * bs;
            fill = fill < 0 ? 0 : fill > bs ? bs : fill;
            int32_t *f = &scratch[q->kv.blocks[j]];
            if (*f < 0) {
                a += bs;
                *f = 0;
            }
            if (fill > *f) {
                u += fill - *f;
                *f = fill;
            }
        }
    }
    *allocated = a;
    *used = u;
}
