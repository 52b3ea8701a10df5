/*
 * test_engine_gemma2.c - the serving engine on a Gemma 2 model (tiny-gemma2:
 * 26 layers, window 8 on the even layers, attention soft cap 4, final cap 30;
 * docs/architectures.md, "Gemma 2"): three requests of different prompt
 * lengths run side by side in mixed batches (prompt chunks next to decode
 * tokens) over the paged KV cache, and each one's tokens and every sampled
 * logits row equal plain decoding of it alone with kite_ctx_eval, bit for
 * bit - the soft cap is applied inside every attention path the engine takes.
 * The same with speculative decoding by prompt lookup (greedy: equal to
 * plain), and with the prompts split into chunks of 5 tokens.
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

enum { N_REQ = 3, N_GEN = 24 };

static char tmpdir[] = "/tmp/kite-test-enggemma2-XXXXXX";
static char model_file[300];

TEST(gemma2_batched_equals_solo) {
    static req_spec specs[N_REQ];
    static collect ref[N_REQ], out[N_REQ];
    static const int32_t n_prompt[N_REQ] = {5, 19, 33}; /* inside, around and beyond the window of 8 */
    for (int32_t i = 0; i < N_REQ; i++) {
        memset(&specs[i], 0, sizeof specs[i]);
        specs[i].prompt[0] = 1; /* BOS */
        /* repeated runs, so that prompt lookup finds drafts */
        for (int32_t j = 1; j < n_prompt[i]; j++) specs[i].prompt[j] = 3 + (kite_token)((i * 131 + (j % 7) * 37) % 500);
        specs[i].n_prompt = n_prompt[i];
        specs[i].max_tokens = N_GEN;
        specs[i].ignore_eos = true;
        memset(&ref[i], 0, sizeof ref[i]);
        reference(&specs[i], &ref[i]);
    }
    static const struct {
        const char *what;
        int32_t lookup, step_tokens;
    } cases[] = {{"mixed batches", 0, 64}, {"prompt lookup", 3, 64}, {"chunks of 5", 0, 5}};
    for (int c = 0; c < 3; c++) {
        /* K+V of 26 layers x 2 kv heads x 32 floats per position, room for every sequence */
        const int64_t pos_bytes = 2 * 26 * 2 * 32 * 4;
        engine_params p = harness_params(N_REQ, MAX_TOK, pos_bytes * 4 * 128, cases[c].step_tokens);
        p.spec_lookup_n = cases[c].lookup;
        engine *e = harness_engine(&p);
        if (!e) continue;
        run_all(e, specs, N_REQ, out);
        for (int32_t i = 0; i < N_REQ; i++) {
            CHECK_MSG(same_output(&out[i], &ref[i]), "%s: request %d differs from plain decoding", cases[c].what, i);
            CHECK_MSG(same_logits(&out[i], &ref[i]), "%s: request %d: logits differ", cases[c].what, i);
            collect_destroy(&out[i]);
        }
        engine_free(e);
    }
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(model_file, sizeof model_file, "%s/tiny-gemma2.gguf", tmpdir);
    g_model = harness_synth_model(model_file, "tiny-gemma2");
    if (g_model) RUN(gemma2_batched_equals_solo);
    kite_model_free(g_model);
    unlink(model_file);
    rmdir(tmpdir);
    return harness_summary("test_engine_gemma2");
}
