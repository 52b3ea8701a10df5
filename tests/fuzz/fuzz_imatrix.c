/*
 * fuzz_imatrix.c - libFuzzer target for the importance-matrix reader
 * (src/quant/imatrix.c): files from `kite imatrix` and llama-imatrix that
 * users hand to `kite quantize --imatrix`.
 *
 * An accepted file must keep the reader's contract: at least one entry,
 * names non-empty, NUL-free and unique, every value finite and >= 0 with
 * its importance (value / ncall) finite too, and imatrix_find() returning
 * each entry by its name.  Seeds are in tests/fuzz/corpus/fuzz_imatrix/.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "quant/imatrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    imatrix *m = NULL;
    if (imatrix_parse(data, size, "fuzz", &m) != KITE_OK) {
        KITE_ASSERT(m == NULL && kite_last_error()[0] != '\0');
        return 0;
    }
    KITE_ASSERT(m && m->n_entries >= 1);
    for (int32_t i = 0; i < m->n_entries; i++) {
        const imatrix_entry *e = &m->e[i];
        KITE_ASSERT(e->name && e->name[0] && e->n >= 1 && e->ncall >= 0);
        KITE_ASSERT(imatrix_find(m, e->name) == e);
        for (int32_t j = 0; j < e->n; j++) KITE_ASSERT(isfinite(e->values[j]) && e->values[j] >= 0 && isfinite(e->qw[j]));
    }
    imatrix_free(m);
    return 0;
}
