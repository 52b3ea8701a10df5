/*
 * fuzz_size.c - libFuzzer target for the --mem-budget size parser
 * (offload_parse_size, src/model/offload.c): the input, NUL-terminated, is
 * parsed; an accepted size is > 0 and an error leaves a message.  Seeds are
 * in tests/fuzz/corpus/fuzz_size/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kite.h"
#include "model/offload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 256) return 0;
    char buf[257];
    memcpy(buf, data, size);
    buf[size] = 0;
    uint64_t v = 0;
    const int rc = offload_parse_size(buf, &v);
    KITE_ASSERT(rc == KITE_OK ? v > 0 : rc == KITE_E_ARG && kite_last_error()[0] != 0);
    return 0;
}
