/*
 * fuzz_safetensors.c - libFuzzer target for the safetensors parser
 * (tools/convert/safetensors.c).
 *
 * Parses the input with st_parse() and, when it is accepted, checks the
 * parser's contract: names sorted and distinct, 0..4 dims, nbytes equal to
 * the element count times the element size, and every tensor's data inside
 * the input - then reads each tensor's first and last byte.  On rejection
 * the message must be one line naming the input.  Seeds are in
 * tests/fuzz/corpus/fuzz_safetensors/.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "convert/safetensors.h"
#include "tensor/dtype.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_tensor *t = NULL;
    size_t n = 0;
    int rc = st_parse(data, size, "fuzz.safetensors", &t, &n);
    if (rc != KITE_OK) {
        const char *msg = kite_last_error();
        KITE_ASSERT(strncmp(msg, "fuzz.safetensors: ", 18) == 0);
        KITE_ASSERT(strchr(msg, '\n') == NULL);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        const st_tensor *x = &t[i];
        KITE_ASSERT(x->n_dims <= ST_MAX_DIMS);
        KITE_ASSERT(x->dtype == KITE_DTYPE_F32 || x->dtype == KITE_DTYPE_F16 || x->dtype == KITE_DTYPE_BF16);
        uint64_t count = 1;
        for (uint32_t d = 0; d < x->n_dims; d++) count *= (uint64_t)x->shape[d];
        KITE_ASSERT(count * (x->dtype == KITE_DTYPE_F32 ? 4u : 2u) == x->nbytes);
        KITE_ASSERT(x->data >= data && x->data + x->nbytes <= data + size);
        if (i) KITE_ASSERT(strcmp(t[i - 1].name, x->name) < 0);
        if (x->nbytes) sink += x->data[0] + x->data[x->nbytes - 1];
    }
    st_tensors_free(t, n);
    return 0;
}
