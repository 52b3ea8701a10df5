/*
 * test_engine_window.c - the serving engine on a sliding-window model
 * (tiny-mistral: window 8 on both layers; docs/engine.md, "Sliding windows"):
 * blocks that have left every layer's window go back to the pool
 * (kv_drop_before), so four 440-position sequences run side by side in a pool
 * of 80 blocks of 16 (1280 positions) without a preemption, each holding at
 * most window + one attention tile + a block of blocks; outputs and every
 * sampled logits row equal plain decoding with kite_ctx_eval.  The same with
 * speculative decoding by prompt lookup (rollbacks) and without the prefix
 * cache; with a pool large enough to keep them, a second run of the same
 * prompts reuses the released (cached) blocks through the prefix cache with
 * the same output (in the small pool they are evicted first: it recomputes).  With the pool too small for the full sequences,
 * dropping is what avoids preemption: the block count the test bounds is
 * far below what the sequences would otherwise hold (28 blocks each).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kite.h"
#include "engine/engine.h"
#include "roofline/synth.h"
#include "tensor/dtype.h"

#include "engine_harness.h"
#include "synth_harness.h"

enum { N_REQ = 4, N_PROMPT = 40, N_GEN = 400, N_BLOCKS = 80, BS = 16 };

static char tmpdir[] = "/tmp/kite-test-engwin-XXXXXX";
static char model_file[300];

static void make_specs(req_spec *specs) {
    for (int32_t i = 0; i < N_REQ; i++) {
        memset(&specs[i], 0, sizeof specs[i]);
        specs[i].prompt[0] = 1; /* BOS */
        for (int32_t j = 1; j < N_PROMPT; j++) specs[i].prompt[j] = 3 + (kite_token)((i * 131 + j * 37) % 500);
        specs[i].n_prompt = N_PROMPT;
        specs[i].max_tokens = N_GEN;
        specs[i].ignore_eos = true;
    }
}

/* Runs the specs at once on an engine with p, and checks them against refs;
 * *max_used: the most KV blocks in use seen while they ran. */
static void run_checked(const engine_params *p, const req_spec *specs, const collect *ref, const char *what,
                        bool want_hits, int32_t *max_used, engine_stats *st_out) {
    static collect out[N_REQ];
    engine *e = harness_engine(p);
    if (!e) return;
    *max_used = 0;
    for (int rep = 0; rep < 2; rep++) {
        for (int32_t i = 0; i < N_REQ; i++) collect_init(&out[i]);
        for (int32_t i = 0; i < N_REQ; i++) {
            engine_req q = to_req(&specs[i]);
            CHECK_EQ_INT(engine_submit(e, &q, on_event, &out[i], NULL), KITE_OK);
        }
        for (int32_t i = 0; i < N_REQ; i++) {
            for (int k = 0; k < 60000 && !out[i].done; k++) {
                engine_stats st;
                engine_get_stats(e, &st);
                if (st.kv_blocks_used > *max_used) *max_used = st.kv_blocks_used;
                sleep_ms(1);
            }
            CHECK_MSG(collect_wait(&out[i], 60), "%s: request %d did not finish", what, i);
        }
        for (int32_t i = 0; i < N_REQ; i++) {
            CHECK_MSG(same_output(&out[i], &ref[i]), "%s (run %d): request %d differs from plain decoding", what,
                      rep, i);
            CHECK_MSG(same_logits(&out[i], &ref[i]), "%s (run %d): request %d: logits differ", what, rep, i);
            if (rep == 1 && want_hits)
                CHECK_MSG(out[i].n_cached > 0, "%s: request %d found no cached prefix the second time", what, i);
            collect_destroy(&out[i]);
        }
    }
    stats_after(e, 2 * N_REQ, st_out);
    engine_free(e);
}

TEST(window_blocks_freed_outputs_equal) {
    static req_spec specs[N_REQ];
    static collect ref[N_REQ];
    make_specs(specs);
    for (int32_t i = 0; i < N_REQ; i++) {
        memset(&ref[i], 0, sizeof ref[i]);
        reference(&specs[i], &ref[i]);
    }
    const int64_t pos_bytes = 2 * (int64_t)2 * 2 * 16 * 4; /* K+V, 2 layers, 2 kv heads of 16 floats */
    /* in the small pool the released first blocks are the oldest cached ones, evicted
     * first: the second run recomputes (a miss is correct); a large pool keeps them */
    static const struct {
        const char *what;
        int32_t lookup, n_blocks;
        bool no_prefix;
    } cases[] = {{"plain", 0, N_BLOCKS, false},
                 {"no prefix cache", 0, N_BLOCKS, true},
                 {"prompt lookup", 3, N_BLOCKS, false},
                 {"large pool", 0, 5 * N_BLOCKS, false}};
    for (int c = 0; c < 4; c++) {
        engine_params p = harness_params(N_REQ, MAX_TOK, pos_bytes * BS * cases[c].n_blocks, 64);
        p.block_size = BS;
        p.spec_lookup_n = cases[c].lookup;
        p.no_prefix_cache = cases[c].no_prefix;
        int32_t max_used = 0;
        engine_stats st = {0};
        run_checked(&p, specs, ref, cases[c].what, cases[c].n_blocks > N_BLOCKS, &max_used, &st);
        /* window 8 and FlashAttention's KV tile of 256 (head_dim 16): a sequence
         * holds blocks from (p - 7) rounded down to 256 up to p, at most 256 / 16 + 2,
         * plus its pending (draft) tokens' block */
        const int32_t bound = N_REQ * (256 / BS + 3);
        printf("    %-16s most blocks in use %d (bound %d; the full sequences need %d), %lld preemptions\n",
               cases[c].what, max_used, bound, N_REQ * ((N_PROMPT + N_GEN + BS - 1) / BS),
               (long long)st.preemptions);
        CHECK_MSG(max_used <= bound, "%s: %d blocks in use, bound %d", cases[c].what, max_used, bound);
        CHECK_EQ_INT(st.preemptions, 0);
        CHECK_EQ_INT(st.kv_blocks_used, 0);
    }
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(model_file, sizeof model_file, "%s/tiny-mistral.gguf", tmpdir);
    g_model = harness_synth_model(model_file, "tiny-mistral");
    if (g_model) RUN(window_blocks_freed_outputs_equal);
    kite_model_free(g_model);
    unlink(model_file);
    rmdir(tmpdir);
    return harness_summary("test_engine_window");
}
