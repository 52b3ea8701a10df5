/*
 * generate.c - the generation step (kite_gen_* in kite.h): sample -> stop
 * rules -> record -> streaming detokenize, for every decoding loop of kite
 * (`kite run` plain and speculative, `kite chat`, the serving engine).
 *
 * DESIGN
 *   The stop rules of kite.h are written here and nowhere else: a generated
 *   BOS or end-of-generation token (unless ignore_eos), a caller's stop
 *   token, the token limit, a full context.  A step judges one token; what
 *   the caller does between steps (one kite_ctx_eval, a batched forward pass,
 *   a speculative verification) is not its business, so the same rules serve
 *   a loop that samples from its own logits and one that pushes tokens a
 *   verifier accepted.  Stop strings act on text and stay with the callers
 *   that have them (kite chat, engine/stop.c).
 *
 *   Grammar (p.grammar).  The generation keeps a matcher of the grammar; a
 *   step masks the logits with the grammar's token mask (cached: a few
 *   microseconds), lets end-of-generation and stop tokens through only where
 *   the grammar may end, samples, and advances the matcher by the token's
 *   bytes (tokens may end inside a UTF-8 character: the matcher keeps the
 *   partial character).  When the grammar is complete and allows nothing
 *   more the generation ends at once (KITE_STOP_GRAMMAR) instead of spending
 *   a forward pass on an end-of-generation token.
 *
 *   Lazy grammars (kite_grammar_new_lazy).  Until a trigger appears in the
 *   output the grammar is not in force: nothing is masked, end tokens end
 *   freely, and each token's bytes go to a search over the output's last
 *   bytes (lazy_state.tail, one trigger's length), so that a trigger split
 *   across tokens is found.  The token that completes a trigger is judged by
 *   a fresh matcher fed the text from the trigger's first byte to the token's
 *   end, on the scratch matcher (try_gm) so that a refusal leaves the
 *   generation's matcher fresh; taken, the grammar is in force from then on
 *   exactly as a plain one.  Drafts keep their own lazy_state (try_lz).
 *
 * INVARIANTS
 *   stop != KITE_STOP_NONE  <=>  no further token is taken until the next
 *   kite_gen_begin.  n_gen counts output tokens only.  piece has
 *   vocab_detok_out_cap bytes, so no detokenizer call fails for room.
 *
 * OWNERSHIP / THREADS
 *   The generator borrows the model and the sampler of its params; it owns
 *   the detokenizer and the piece buffer, allocated once in kite_gen_new.
 *   One thread at a time.
 */
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "core/error.h"
#include "generate/gen_grammar.h"
#include "model/model.h"
#include "tokenizer/vocab.h"

#define GEN_MAX_EOG 16 /* end-of-generation tokens a vocabulary may have (vocab_internal.h keeps 8) */

/* Where a lazy grammar's trigger search stands. */
typedef struct lazy_state {
    bool on;            /* the grammar is in force (always for a grammar without triggers) */
    bool lead;          /* every output byte before tail is white space (at_start triggers) */
    uint32_t tail_len;
    char tail[KITE_GRAMMAR_TRIGGER_MAX - 1]; /* the output's last bytes */
} lazy_state;

struct kite_gen {
    const vocab *v;      /* the model's vocabulary (borrowed) */
    kite_token bos;      /* -1 if none */
    int32_t n_vocab;
    kite_detok *dt;      /* owned */
    char *piece;         /* [piece_cap] text of the last call */
    size_t piece_cap;
    kite_gen_params p;   /* rules of the current generation */
    int32_t n_past;      /* positions before the first generated token */
    int64_t n_gen;       /* output tokens since kite_gen_begin */
    int stop;            /* enum kite_stop */
    kite_token eog[GEN_MAX_EOG]; /* the vocabulary's end-of-generation tokens */
    int n_eog;
    grammar_matcher *gm; /* owned: p.grammar's state in this generation, or NULL */
    grammar_matcher *try_gm; /* owned: scratch copy of gm for drafts (kite_gen_check_draft, kite_gen_draft_*),
                                made at the first call of a generation */
    uint32_t *try_mask;  /* [(n_vocab + 31) / 32] try_gm's mask (kite_gen_draft_masked_logits), or NULL */
    bool try_mask_valid;
    bool drafting;       /* try_gm follows a draft of kite_gen_draft_begin */
    lazy_state lz;       /* the generation's trigger search (p.grammar lazy) */
    lazy_state try_lz;   /* the draft's, beside try_gm */
    uint32_t *mask;      /* [(n_vocab + 31) / 32] allowed tokens of the current state */
    bool mask_valid;     /* mask is the current state's */
    float *masked;       /* [n_vocab] kite_gen_masked_logits' row */
};

const char *kite_stop_name(int stop) {
    switch (stop) {
    case KITE_STOP_NONE: return "";
    case KITE_STOP_LENGTH: return "length";
    case KITE_STOP_EOG: return "eog";
    case KITE_STOP_BOS: return "bos";
    case KITE_STOP_CONTEXT: return "context";
    case KITE_STOP_TOKEN: return "stop token";
    case KITE_STOP_GRAMMAR: return "grammar";
    default: return "";
    }
}

kite_gen_params kite_gen_default_params(void) {
    kite_gen_params p = {.n_predict = 256};
    return p;
}

int kite_gen_new(const kite_model *model, kite_gen **out) {
    if (!model || !model->vocab || !out) return err_set(KITE_E_ARG, "kite_gen_new: model and out are required");
    kite_gen *g = calloc(1, sizeof *g);
    if (!g) return err_set(KITE_E_NOMEM, "kite_gen_new: out of memory");
    g->v = model->vocab;
    g->bos = vocab_bos(g->v);
    g->n_vocab = vocab_n_tokens(g->v);
    g->stop = KITE_STOP_LENGTH;
    int rc = vocab_detok_new(g->v, &g->dt);
    if (rc != KITE_OK) goto fail;
    g->piece_cap = vocab_detok_out_cap(g->dt);
    g->piece = malloc(g->piece_cap);
    if (!g->piece) {
        rc = err_set(KITE_E_NOMEM, "kite_gen_new: out of memory");
        goto fail;
    }
    g->piece[0] = '\0';
    for (int32_t t = 0; t < g->n_vocab && g->n_eog < GEN_MAX_EOG; t++)
        if (vocab_is_eog(g->v, t)) g->eog[g->n_eog++] = t;
    *out = g;
    return KITE_OK;
fail:
    kite_gen_free(g);
    return rc;
}

void kite_gen_free(kite_gen *g) {
    if (!g) return;
    kite_detok_free(g->dt);
    free(g->piece);
    grammar_matcher_free(g->gm);
    grammar_matcher_free(g->try_gm);
    free(g->try_mask);
    free(g->mask);
    free(g->masked);
    free(g);
}

int kite_gen_begin(kite_gen *g, const kite_gen_params *p, int32_t n_past) {
    if (!g || !p || n_past < 0 || p->n_ctx < 0 || p->n_stop_tokens < 0 || (p->n_stop_tokens > 0 && !p->stop_tokens))
        return err_set(KITE_E_ARG, "kite_gen_begin: bad arguments");
    if (p->grammar) {
        if (p->grammar->vocab != (const void *)g->v)
            return err_set(KITE_E_ARG, "kite_gen_begin: the grammar was compiled for another model's vocabulary");
        grammar_matcher *gm = NULL;
        int rc = grammar_matcher_new(p->grammar->g, NULL, &gm);
        if (rc) return rc;
        if (!g->mask) g->mask = malloc(((size_t)g->n_vocab + 31) / 32 * sizeof *g->mask);
        if (!g->masked) g->masked = malloc((size_t)g->n_vocab * sizeof *g->masked);
        if (!g->mask || !g->masked) {
            grammar_matcher_free(gm);
            return err_set(KITE_E_NOMEM, "kite_gen_begin: out of memory");
        }
        grammar_matcher_free(g->gm);
        g->gm = gm;
    } else {
        grammar_matcher_free(g->gm);
        g->gm = NULL;
    }
    grammar_matcher_free(g->try_gm); /* its grammar may be gone: a new one at the first check */
    g->try_gm = NULL;
    g->drafting = false;
    g->mask_valid = false;
    g->lz = (lazy_state){.on = !p->grammar || !p->grammar->n_trig, .lead = true};
    g->try_lz = g->lz;
    g->p = *p;
    g->n_past = n_past;
    g->n_gen = 0;
    g->stop = p->n_predict > 0 ? KITE_STOP_NONE : KITE_STOP_LENGTH;
    return KITE_OK;
}

/* Fills out for token t with n bytes of text in g->piece. */
static void step_out(const kite_gen *g, kite_token t, bool output, int n, kite_gen_step *out) {
    out->token = t;
    out->stop = g->stop;
    out->output = output;
    out->text = g->piece;
    out->len = (size_t)n;
    out->n_gen = g->n_gen;
}

int kite_gen_echo(kite_gen *g, kite_token t, kite_gen_step *out) {
    if (!g || !out) return err_set(KITE_E_ARG, "kite_gen_echo: NULL argument");
    const int n = kite_detok_push(g->dt, t, g->piece, g->piece_cap);
    if (n < 0) return n;
    step_out(g, t, false, n, out);
    return KITE_OK;
}

/* The rules of kite.h, in their order: what ends the generation before t is
 * output (BOS, EOG, a stop token), or KITE_STOP_NONE. */
static int stop_before(const kite_gen *g, kite_token t) {
    if (!g->p.ignore_eos) {
        if (t == g->bos && g->bos >= 0) return KITE_STOP_BOS;
        if (vocab_is_eog(g->v, t)) return KITE_STOP_EOG;
    }
    for (int32_t i = 0; i < g->p.n_stop_tokens; i++)
        if (t == g->p.stop_tokens[i]) return KITE_STOP_TOKEN;
    return KITE_STOP_NONE;
}

/* ---- lazy grammars ---- */

static bool is_white(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Byte i of the output's tail followed by piece. */
static inline char tail_at(const lazy_state *lz, const char *piece, size_t i) {
    return i < lz->tail_len ? lz->tail[i] : piece[i - lz->tail_len];
}

/* The first byte (in tail + piece) of the earliest trigger that ends inside piece[0..n), or -1
 * (triggers ending in the tail were looked for with the token that ended them). */
static int64_t lazy_find(const kite_grammar *kg, const lazy_state *lz, const char *piece, size_t n) {
    const size_t total = lz->tail_len + n;
    size_t white = 0; /* leading white bytes of tail + piece, when all before the tail were white */
    if (lz->lead)
        while (white < total && is_white(tail_at(lz, piece, white))) white++;
    for (size_t at = 0; at < total; at++)
        for (uint32_t i = 0; i < kg->n_trig; i++) {
            const size_t l = kg->trig_len[i];
            if (at + l > total || at + l <= lz->tail_len) continue;
            if (kg->trig_start[i] && !(lz->lead && at <= white)) continue;
            size_t k = 0;
            while (k < l && tail_at(lz, piece, at + k) == kg->trig[i][k]) k++;
            if (k == l) return (int64_t)at;
        }
    return -1;
}

/* Appends piece[0..n) to the tail, keeping its last bytes. */
static void lazy_advance(lazy_state *lz, const char *piece, size_t n) {
    const size_t cap = sizeof lz->tail;
    if (n >= cap) {
        for (size_t i = 0; i < lz->tail_len && lz->lead; i++) lz->lead = is_white(lz->tail[i]);
        for (size_t i = 0; i < n - cap && lz->lead; i++) lz->lead = is_white(piece[i]);
        memcpy(lz->tail, piece + (n - cap), cap);
        lz->tail_len = (uint32_t)cap;
        return;
    }
    const size_t drop = lz->tail_len + n > cap ? lz->tail_len + n - cap : 0;
    for (size_t i = 0; i < drop && lz->lead; i++) lz->lead = is_white(lz->tail[i]);
    memmove(lz->tail, lz->tail + drop, lz->tail_len - drop);
    memcpy(lz->tail + (lz->tail_len - drop), piece, n);
    lz->tail_len = (uint32_t)(lz->tail_len - drop + n);
}

static int try_matcher_reset(kite_gen *g);

/* Token bytes piece[0..n) on a lazy grammar not yet in force, whose search is lz: 1 when they
 * complete a trigger and a fresh matcher took the text from the trigger on (that matcher is
 * try_gm, lz->on set), 0 when not (try_gm may hold a refused text), or a negative status.
 * g->gm is fresh here: the grammar is not in force for the generation either. */
static int lazy_feed(kite_gen *g, lazy_state *lz, const char *piece, size_t n) {
    const int64_t at = lazy_find(g->p.grammar, lz, piece, n);
    if (at >= 0) {
        int rc = try_matcher_reset(g);
        if (rc) return rc;
        const size_t s = (size_t)at;
        if (s < lz->tail_len) rc = grammar_matcher_accept_bytes(g->try_gm, lz->tail + s, lz->tail_len - s);
        if (!rc) rc = s < lz->tail_len ? grammar_matcher_accept_bytes(g->try_gm, piece, n)
                                        : grammar_matcher_accept_bytes(g->try_gm, piece + (s - lz->tail_len),
                                                                       n - (s - lz->tail_len));
        if (!rc) {
            lz->on = true;
            return 1;
        }
        if (rc != KITE_E_STATE) return rc; /* refused: this occurrence does not count */
    }
    lazy_advance(lz, piece, n);
    return 0;
}

int kite_gen_push(kite_gen *g, kite_token t, kite_gen_step *out) {
    if (!g || !out) return err_set(KITE_E_ARG, "kite_gen_push: NULL argument");
    if (g->stop != KITE_STOP_NONE) return err_set(KITE_E_STATE, "kite_gen_push: the generation is over");
    if (t < 0 || t >= g->n_vocab)
        return err_set(KITE_E_RANGE, "kite_gen_push: token %d is outside the vocabulary (%d tokens)", t, g->n_vocab);
    const int stop = stop_before(g, t);
    if (g->gm && !g->lz.on) { /* a lazy grammar not yet in force: every token goes */
        if (stop == KITE_STOP_NONE) {
            const char *piece;
            char buf[8];
            int n = vocab_token_to_piece(g->v, t, &piece, buf);
            lazy_state lz = g->lz;
            int rc = n > 0 ? lazy_feed(g, &lz, piece, (size_t)n) : 0;
            if (rc > 0) rc = grammar_matcher_copy(g->gm, g->try_gm);
            if (rc < 0) return rc;
            g->lz = lz;
            g->drafting = false; /* lazy_feed used try_gm */
            g->mask_valid = false;
        }
    } else if (g->gm) { /* the grammar first: a token it refuses changes nothing */
        if (stop != KITE_STOP_NONE) {
            if (!grammar_matcher_is_accepting(g->gm))
                return err_set(KITE_E_STATE, "kite_gen_push: token %d ends the generation where the grammar "
                                             "cannot end", t);
        } else {
            const char *piece;
            char buf[8];
            int n = vocab_token_to_piece(g->v, t, &piece, buf);
            if (n <= 0) return err_set(KITE_E_STATE, "kite_gen_push: token %d has no text for the grammar", t);
            int rc = grammar_matcher_accept_bytes(g->gm, piece, (size_t)n);
            if (rc) return rc == KITE_E_STATE ? err_set(KITE_E_STATE, "kite_gen_push: token %d: %s", t,
                                                        kite_last_error())
                                              : rc;
            g->mask_valid = false;
        }
    }
    g->stop = stop;
    if (g->stop != KITE_STOP_NONE) {
        g->piece[0] = '\0';
        step_out(g, t, false, 0, out);
        return KITE_OK;
    }
    if (g->p.sampler) kite_sampler_accept(g->p.sampler, t);
    g->n_gen++;
    const int n = kite_detok_push(g->dt, t, g->piece, g->piece_cap); /* cannot fail: t in range, room */
    KITE_ASSERT(n >= 0);
    if (g->n_gen >= g->p.n_predict) g->stop = KITE_STOP_LENGTH;
    else if (g->p.n_ctx > 0 && (int64_t)g->n_past + g->n_gen > g->p.n_ctx) g->stop = KITE_STOP_CONTEXT;
    else if (g->gm && g->lz.on && grammar_matcher_is_finished(g->gm)) g->stop = KITE_STOP_GRAMMAR;
    step_out(g, t, true, n, out);
    return KITE_OK;
}

/* Steps the scratch matcher over draft token t: TRY_NO (refused; unchanged), TRY_GO (taken, the
 * generation goes on), TRY_END (taken, the generation ends with it), or a negative status. */
enum { TRY_NO = 0, TRY_GO = 1, TRY_END = 2 };
static int try_token(kite_gen *g, kite_token t) {
    if (t < 0 || t >= g->n_vocab) return TRY_NO;
    const int stop = stop_before(g, t);
    if (!g->try_lz.on) { /* a lazy grammar not yet in force */
        if (stop != KITE_STOP_NONE) return TRY_END;
        const char *piece;
        char buf[8];
        const int nb = vocab_token_to_piece(g->v, t, &piece, buf);
        const int rc = nb > 0 ? lazy_feed(g, &g->try_lz, piece, (size_t)nb) : 0;
        if (rc < 0) return rc;
        return rc && grammar_matcher_is_finished(g->try_gm) ? TRY_END : TRY_GO;
    }
    if (stop != KITE_STOP_NONE) /* ends the generation: as the mask, end and stop tokens where it may end */
        return (stop == KITE_STOP_TOKEN || vocab_is_eog(g->v, t)) && grammar_matcher_is_accepting(g->try_gm)
                   ? TRY_END
                   : TRY_NO;
    const char *piece;
    char buf[8];
    const int nb = vocab_token_to_piece(g->v, t, &piece, buf);
    if (nb <= 0) return TRY_NO;
    const int rc = grammar_matcher_accept_bytes(g->try_gm, piece, (size_t)nb);
    if (rc == KITE_E_STATE) return TRY_NO;
    if (rc) return rc;
    return grammar_matcher_is_finished(g->try_gm) ? TRY_END : TRY_GO;
}

/* try_gm := gm (made at the first call of a generation). */
static int try_matcher_reset(kite_gen *g) {
    return g->try_gm ? grammar_matcher_copy(g->try_gm, g->gm) : grammar_matcher_clone(g->gm, &g->try_gm);
}

/* The draft state := the generation's. */
static int try_reset(kite_gen *g) {
    g->try_lz = g->lz;
    return try_matcher_reset(g);
}

int kite_gen_check_draft(kite_gen *g, const kite_token *draft, int32_t n, int32_t *n_ok) {
    if (!g || !n_ok || n < 0 || (n > 0 && !draft)) return err_set(KITE_E_ARG, "kite_gen_check_draft: bad arguments");
    *n_ok = 0;
    if (g->stop != KITE_STOP_NONE) return KITE_OK;
    if (!g->gm) {
        *n_ok = n;
        return KITE_OK;
    }
    int rc = try_reset(g);
    if (rc) return rc;
    g->drafting = false; /* try_gm now follows this check, not a draft */
    for (int32_t i = 0; i < n; i++) {
        rc = try_token(g, draft[i]);
        if (rc < 0) return rc;
        if (rc == TRY_NO) break;
        *n_ok = i + 1;
        if (rc == TRY_END) break;
    }
    return KITE_OK;
}

/* The masked row of logits under matcher m (its mask in mask, recomputed unless *valid). */
static int mask_row(kite_gen *g, grammar_matcher *m, uint32_t *mask, bool *valid, const float *logits,
                    const float **out) {
    if (!*valid) {
        int rc = grammar_matcher_fill_mask_cached(m, g->p.grammar->cache, mask);
        if (rc) return rc;
        *valid = true;
    }
    int64_t n_allowed = grammar_mask_apply(mask, (uint32_t)g->n_vocab, logits, g->masked);
    /* ends: where the grammar may end, the end-of-generation and stop tokens (not with ignore_eos:
     * then an end-of-generation token would be text, and the grammar ends the generation itself) */
    if (grammar_matcher_is_accepting(m)) {
        for (int i = 0; i < g->n_eog && !g->p.ignore_eos; i++, n_allowed++) g->masked[g->eog[i]] = logits[g->eog[i]];
        for (int32_t i = 0; i < g->p.n_stop_tokens; i++, n_allowed++) {
            kite_token t = g->p.stop_tokens[i];
            if (t >= 0 && t < g->n_vocab) g->masked[t] = logits[t];
        }
    }
    if (!n_allowed)
        return err_set(KITE_E_STATE, "kite_gen: no token of the vocabulary continues the grammar here");
    *out = g->masked;
    return KITE_OK;
}

int kite_gen_masked_logits(kite_gen *g, const float *logits, const float **out) {
    if (!g || !logits || !out) return err_set(KITE_E_ARG, "kite_gen_masked_logits: NULL argument");
    if (g->stop != KITE_STOP_NONE) return err_set(KITE_E_STATE, "kite_gen_masked_logits: the generation is over");
    if (!g->gm || !g->lz.on) {
        *out = logits;
        return KITE_OK;
    }
    return mask_row(g, g->gm, g->mask, &g->mask_valid, logits, out);
}

int kite_gen_draft_begin(kite_gen *g) {
    if (!g) return err_set(KITE_E_ARG, "kite_gen_draft_begin: NULL argument");
    g->drafting = false;
    if (g->stop != KITE_STOP_NONE) return err_set(KITE_E_STATE, "kite_gen_draft_begin: the generation is over");
    if (!g->gm) return KITE_OK;
    if (!g->try_mask && !(g->try_mask = malloc(((size_t)g->n_vocab + 31) / 32 * sizeof *g->try_mask)))
        return err_set(KITE_E_NOMEM, "kite_gen_draft_begin: out of memory");
    int rc = try_reset(g);
    if (rc) return rc;
    g->drafting = true;
    g->try_mask_valid = false;
    return KITE_OK;
}

int kite_gen_draft_masked_logits(kite_gen *g, const float *logits, const float **out) {
    if (!g || !logits || !out) return err_set(KITE_E_ARG, "kite_gen_draft_masked_logits: NULL argument");
    if (!g->gm) {
        *out = logits;
        return KITE_OK;
    }
    if (!g->drafting) return err_set(KITE_E_STATE, "kite_gen_draft_masked_logits: no draft (kite_gen_draft_begin)");
    if (!g->try_lz.on) {
        *out = logits;
        return KITE_OK;
    }
    return mask_row(g, g->try_gm, g->try_mask, &g->try_mask_valid, logits, out);
}

int kite_gen_draft_push(kite_gen *g, kite_token t, bool *more) {
    if (!g || !more) return err_set(KITE_E_ARG, "kite_gen_draft_push: NULL argument");
    *more = false;
    if (!g->gm) {
        *more = t >= 0 && t < g->n_vocab && stop_before(g, t) == KITE_STOP_NONE;
        return KITE_OK;
    }
    if (!g->drafting) return err_set(KITE_E_STATE, "kite_gen_draft_push: no draft (kite_gen_draft_begin)");
    const int rc = try_token(g, t);
    if (rc < 0) return rc;
    if (rc == TRY_NO) return err_set(KITE_E_STATE, "kite_gen_draft_push: token %d is not allowed here", t);
    g->try_mask_valid = false;
    *more = rc == TRY_GO;
    if (!*more) g->drafting = false;
    return KITE_OK;
}

int kite_gen_pick(kite_gen *g, const float *logits, kite_token *out) {
    if (!g || !logits || !out) return err_set(KITE_E_ARG, "kite_gen_pick: NULL argument");
    if (!g->p.sampler) return err_set(KITE_E_STATE, "kite_gen_pick: the generation has no sampler");
    const float *row;
    int rc = kite_gen_masked_logits(g, logits, &row);
    if (rc) return rc;
    kite_token t = kite_sampler_sample(g->p.sampler, row);
    /* the sampler returns the lowest surviving id when nothing has mass; under a grammar that
     * would be a refused token, so check rather than trust */
    if (row != logits && row[t] == -INFINITY)
        return err_set(KITE_E_STATE, "kite_gen_pick: every token the grammar allows has zero probability");
    *out = t;
    return KITE_OK;
}

int kite_gen_sample(kite_gen *g, const float *logits, kite_gen_step *out) {
    if (!g || !logits || !out) return err_set(KITE_E_ARG, "kite_gen_sample: NULL argument");
    if (!g->p.sampler) return err_set(KITE_E_STATE, "kite_gen_sample: the generation has no sampler");
    if (g->stop != KITE_STOP_NONE) return err_set(KITE_E_STATE, "kite_gen_sample: the generation is over");
    kite_token t;
    int rc = kite_gen_pick(g, logits, &t);
    if (rc) return rc;
    return kite_gen_push(g, t, out);
}

int kite_gen_stopped(const kite_gen *g) { return g ? g->stop : KITE_STOP_LENGTH; }

int kite_gen_flush(kite_gen *g, const char **text, size_t *len) {
    if (!g || !text || !len) return err_set(KITE_E_ARG, "kite_gen_flush: NULL argument");
    const int n = kite_detok_flush(g->dt, g->piece, g->piece_cap);
    if (n < 0) return n;
    *text = g->piece;
    *len = (size_t)n;
    return KITE_OK;
}
