/*
 * fuzz_logits.c - libFuzzer target for the logits-file reader
 * (src/eval/logits_file.c): kite's "KITELOGP" files and llama.cpp's
 * "_logits_" files, both given to `kite ppl --kld-base` by users.
 *
 * The reader takes a path, so each input is written to one temporary file
 * (made once, under TMPDIR or /tmp, removed at exit).  An accepted file must
 * keep the reader's contract: the ids in range, a llama.cpp file's chunks
 * in range and its targets taken from them, and every row read either fails
 * with one line naming the file or gives entries that are log-probabilities
 * (no NaN, none above 1e-3).  Seeds are in tests/fuzz/corpus/fuzz_logits/.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "eval/eval.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_path[4096];

static void remove_tmp(void) {
    if (fuzz_path[0]) unlink(fuzz_path);
}

/* Writes data to the temporary file; false when it cannot be written. */
static int put_file(const uint8_t *data, size_t size) {
    if (!fuzz_path[0]) {
        const char *dir = getenv("TMPDIR");
        snprintf(fuzz_path, sizeof fuzz_path, "%s/kite-fuzz-logits-XXXXXX", dir && *dir ? dir : "/tmp");
        int fd = mkstemp(fuzz_path);
        if (fd < 0) {
            fuzz_path[0] = 0;
            return 0;
        }
        close(fd);
        atexit(remove_tmp);
    }
    FILE *f = fopen(fuzz_path, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!put_file(data, size)) return 0;
    eval_logits_reader *r = NULL;
    int rc = eval_logits_read_open(fuzz_path, &r);
    if (rc != KITE_OK) {
        const char *msg = kite_last_error();
        KITE_ASSERT(strncmp(msg, fuzz_path, strlen(fuzz_path)) == 0);
        KITE_ASSERT(strchr(msg, '\n') == NULL);
        return 0;
    }
    const eval_logits_header *h = eval_logits_read_header(r);
    const kite_token *ids = eval_logits_read_ids(r);
    for (uint64_t i = 0; i < h->n_tokens; i++) KITE_ASSERT(ids[i] >= 0 && (uint32_t)ids[i] < h->n_vocab);
    int32_t n_chunk = 0;
    const kite_token *chunks = eval_logits_read_chunks(r, &n_chunk);
    if (eval_logits_read_format(r) == EVAL_LOGITS_LLAMACPP) {
        KITE_ASSERT(chunks != NULL && n_chunk >= 1);
        KITE_ASSERT(ids[0] == chunks[h->n_ctx / 2 + 1]);
    } else {
        KITE_ASSERT(chunks == NULL && n_chunk == 0);
    }
    /* rows: at most a few, the file's size bounds the work anyway */
    float *row = malloc(sizeof *row * h->n_vocab);
    if (row) {
        for (uint64_t i = 0; i < h->n_tokens && i < 4; i++) {
            if (eval_logits_read_row(r, row) != KITE_OK) {
                KITE_ASSERT(strchr(kite_last_error(), '\n') == NULL);
                break;
            }
            for (uint32_t v = 0; v < h->n_vocab; v++) KITE_ASSERT(!isnan(row[v]) && row[v] <= 1e-3f);
        }
        free(row);
    }
    eval_logits_read_close(r);
    return 0;
}
