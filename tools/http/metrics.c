/*
 * metrics.c - GET /metrics: Prometheus text exposition (format 0.0.4) of the
 * engine's counters (engine_get_stats) and the server's own.
 *
 * kite_kv_waste_ratio = 1 - used / allocated token slots of the blocks held
 * by running sequences (0 when nothing is allocated): the share of KV memory
 * reserved but not holding a token.
 *
 * Thread safety: any thread (engine_get_stats is thread-safe, the server
 * counters are atomics).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/gate.h"
#include "server_internal.h"

typedef struct text {
    char *p;
    size_t len, cap;
    bool oom;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t nc = t->cap * 2 + (size_t)n;
        char *q = realloc(t->p, nc);
        if (!q) {
            t->oom = true;
            return;
        }
        t->p = q;
        t->cap = nc;
    }
}

static void metric(text *t, const char *name, const char *type, const char *help, double v) {
    add(t, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

static void histogram(text *t, const char *name, const char *help, srv_hist *h) {
    add(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    int64_t cum = 0;
    for (int32_t i = 0; i < h->n_le; i++) {
        cum += atomic_load(&h->bucket[i]);
        add(t, "%s_bucket{le=\"%g\"} %lld\n", name, h->le[i], (long long)cum);
    }
    cum += atomic_load(&h->bucket[h->n_le]);
    /* count from the buckets, so the +Inf bucket always equals _count even
     * while another thread is observing */
    add(t, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.9f\n%s_count %lld\n", name, (long long)cum, name,
        (double)atomic_load(&h->sum_ns) * 1e-9, name, (long long)cum);
}

char *metrics_text(server *s) {
    engine_stats st;
    memset(&st, 0, sizeof st);
    engine_get_stats(s->eng, &st);
    text t = {.p = malloc(4096), .cap = 4096};
    if (!t.p) return NULL;
    t.p[0] = '\0';
    metric(&t, "kite_requests_total", "counter", "Sequences submitted to the engine (generation requests and embedding inputs).",
           (double)st.requests_total);
    metric(&t, "kite_requests_done_total", "counter", "Engine sequences finished in any way.", (double)st.requests_done);
    metric(&t, "kite_embedding_inputs_total", "counter", "Embedding inputs submitted to the engine.", (double)st.embed_total);
    metric(&t, "kite_tokens_in_total", "counter", "Prompt tokens of admitted requests.", (double)st.tokens_in);
    metric(&t, "kite_tokens_out_total", "counter", "Generated tokens.", (double)st.tokens_out);
    metric(&t, "kite_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens not recomputed thanks to the prefix cache.", (double)st.prefix_hit_tokens);
    metric(&t, "kite_preemptions_total", "counter", "Sequences preempted (recomputed later) for lack of KV blocks.",
           (double)st.preemptions);
    metric(&t, "kite_engine_steps_total", "counter", "Engine forward passes.", (double)st.steps);
    metric(&t, "kite_queue_length", "gauge", "Requests waiting to be admitted.", st.queue_len);
    metric(&t, "kite_running_sequences", "gauge", "Sequences in the running set.", st.running);
    metric(&t, "kite_kv_blocks_total", "gauge", "KV cache blocks in the pool.", st.kv_blocks_total);
    metric(&t, "kite_kv_blocks_used", "gauge", "KV blocks referenced by running sequences.", st.kv_blocks_used);
    metric(&t, "kite_kv_blocks_cached", "gauge", "Unreferenced KV blocks kept for prefix reuse.", st.kv_blocks_cached);
    int64_t free_blocks = (int64_t)st.kv_blocks_total - st.kv_blocks_used - st.kv_blocks_cached;
    metric(&t, "kite_kv_blocks_free", "gauge", "KV blocks neither used nor cached.",
           (double)(free_blocks > 0 ? free_blocks : 0));
    double waste = st.kv_slots_allocated > 0 ? 1.0 - (double)st.kv_slots_used / (double)st.kv_slots_allocated : 0.0;
    metric(&t, "kite_kv_waste_ratio", "gauge", "Share of allocated KV token slots not holding a token.", waste);
    metric(&t, "kite_spec_draft_tokens_total", "counter",
           "Speculative decoding: drafted tokens verified by a forward pass.", (double)st.spec_drafted);
    metric(&t, "kite_spec_accepted_tokens_total", "counter",
           "Speculative decoding: drafted tokens accepted as output.", (double)st.spec_accepted);
    metric(&t, "kite_spec_verify_passes_total", "counter",
           "Speculative decoding: sequence steps that verified a draft.", (double)st.spec_verify_passes);
    metric(&t, "kite_spec_draft_seconds_total", "counter",
           "Speculative decoding: seconds in the model drafter's forward passes.", st.spec_draft_s);
    metric(&t, "kite_spec_pool_drafts_total", "counter",
           "Lookahead: drafts that began with an n-gram from the pool.", (double)st.spec_pool_drafts);
    metric(&t, "kite_kv_draft_blocks_used", "gauge",
           "Model drafters: draft KV blocks held by sequences.", (double)st.kv_draft_blocks_used);
    add(&t, "# HELP kite_http_requests_total HTTP requests answered, by status class.\n"
            "# TYPE kite_http_requests_total counter\n");
    static const char *const cls[6] = {"other", "1xx", "2xx", "3xx", "4xx", "5xx"};
    for (int i = 0; i < 6; i++)
        add(&t, "kite_http_requests_total{code=\"%s\"} %lld\n", cls[i], (long long)atomic_load(&s->http_requests[i]));
    metric(&t, "kite_http_cancelled_total", "counter", "Generations cancelled because their client left.",
           (double)atomic_load(&s->http_cancelled));

    /* backpressure and latency (issue 23; vLLM's names: request_queue_time_seconds,
     * time_to_first_token_seconds, inter_token_latency_seconds, e2e_request_latency_seconds) */
    int inflight = atomic_load(&s->gen_inflight);
    int waiting = inflight - st.running;
    metric(&t, "kite_num_requests_running", "gauge", "Generation requests in the running set.", st.running);
    metric(&t, "kite_num_requests_waiting", "gauge",
           "Generation requests admitted by the server but not running (tokenizing or queued).",
           waiting > 0 ? waiting : 0);
    metric(&t, "kite_request_capacity", "gauge", "Generation and embedding requests the server admits at once (--parallel + --queue).",
           s->gen_capacity);
    add(&t, "# HELP kite_requests_rejected_total Generation and embedding requests answered 503 with Retry-After, by reason.\n"
            "# TYPE kite_requests_rejected_total counter\n");
    static const char *const rej[REJ_N] = {"queue_full", "draining", "tokenizer_busy"};
    for (int i = 0; i < REJ_N; i++)
        add(&t, "kite_requests_rejected_total{reason=\"%s\"} %lld\n", rej[i], (long long)atomic_load(&s->rejected[i]));
    add(&t, "# HELP kite_requests_timed_out_total Generation requests ended by their deadline, by phase.\n"
            "# TYPE kite_requests_timed_out_total counter\n");
    static const char *const tmo[TMO_N] = {"queue", "generation"};
    for (int i = 0; i < TMO_N; i++)
        add(&t, "kite_requests_timed_out_total{phase=\"%s\"} %lld\n", tmo[i], (long long)atomic_load(&s->timed_out[i]));
    histogram(&t, "kite_request_queue_time_seconds", "Seconds from arrival to admission to the running set.", &s->h_queue);
    histogram(&t, "kite_time_to_first_token_seconds", "Seconds from arrival to the first generated token.", &s->h_ttft);
    histogram(&t, "kite_inter_token_latency_seconds", "Seconds between generated tokens of a request.", &s->h_itl);
    histogram(&t, "kite_e2e_request_latency_seconds", "Seconds from arrival to the end of generation.", &s->h_e2e);

    gate_stats gs;
    gate_get_stats(s->gate, &gs);
    metric(&t, "kite_http_connections", "gauge", "Client connections held (waiting for their head or served).",
           (double)gs.open);
    metric(&t, "kite_http_connections_pending", "gauge", "Connections whose request head has not arrived yet.",
           (double)gs.pending);
    metric(&t, "kite_http_connections_accepted_total", "counter", "Connections accepted.", (double)gs.accepted);
    add(&t, "# HELP kite_http_connections_rejected_total Connections answered at once and closed, by reason.\n"
            "# TYPE kite_http_connections_rejected_total counter\n"
            "kite_http_connections_rejected_total{reason=\"max_conns\"} %lld\n"
            "kite_http_connections_rejected_total{reason=\"max_conns_per_ip\"} %lld\n"
            "kite_http_connections_rejected_total{reason=\"draining\"} %lld\n"
            "kite_http_connections_rejected_total{reason=\"no_descriptor\"} %lld\n",
        (long long)gs.rejected_limit, (long long)gs.rejected_per_ip, (long long)gs.rejected_draining,
        (long long)gs.rejected_nofd);
    metric(&t, "kite_http_bad_heads_total", "counter", "Request heads refused by the gate (400/414/431/501/505).",
           (double)gs.bad_heads);
    metric(&t, "kite_http_header_timeouts_total", "counter", "Connections whose head did not arrive in time (408).",
           (double)gs.header_timeouts);
    metric(&t, "kite_http_body_timeouts_total", "counter", "Connections whose body did not arrive in time.",
           (double)gs.body_timeouts);
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p;
}
