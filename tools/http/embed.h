/*
 * embed.h - embeddings for `kite serve` (docs/http.md, "Embeddings"):
 * POST /v1/embeddings (OpenAI) and POST /embedding (llama-server).
 *
 * DESIGN
 *   embed_parse.c turns a request body into an embed_request (a pure
 *   function, fuzzed by tests/fuzz/fuzz_embed.c); embed.c answers it
 *   through the serving engine: each input is an embedding sequence
 *   (engine_req.embed, prefilled in the same batches as generation, pooled
 *   there), at most n_parallel of a request in flight at once so that a
 *   large batch interleaves with the traffic queued behind it.
 *
 * THREADS
 *   embed_parse: any thread.  embed_handle: connection threads, any number
 *   at once (no lock: the engine orders the work).
 */
#ifndef KITE_TOOLS_HTTP_EMBED_H
#define KITE_TOOLS_HTTP_EMBED_H

#include "server_internal.h"

#define EMBED_MAX_INPUTS 2048 /* inputs per request (OpenAI's limit) */

/* A parsed embeddings request: n_input inputs, each either a text or token ids. */
typedef struct embed_request {
    bool oai;                 /* /v1/embeddings (OpenAI response shape); false: /embedding (llama-server's) */
    char *model;              /* "model" (owned) or NULL */
    bool base64;              /* encoding_format "base64": little-endian float32, base64 */
    int32_t n_input;          /* 1..EMBED_MAX_INPUTS */
    char **text;              /* [n_input] owned NUL-terminated texts, or NULL entries for token inputs */
    kite_token **ids;         /* [n_input] owned token ids in [0, n_vocab), or NULL entries for text inputs */
    int32_t *n_ids;           /* [n_input] count of ids[i] (>= 1) */
} embed_request;

/* Parses body (len bytes) of an embeddings request: "input" (OpenAI) or
 * "content" (llama-server) as a non-empty string, an array of them, an
 * array of token ids or an array of such arrays; "encoding_format" "float"
 * or "base64"; "dimensions" only equal to n_embd; "model" a string; "user"
 * a string (accepted, unused).  Any other non-null field is a 400 naming it.
 * Token ids are checked against n_vocab.  Returns true with *r filled, or
 * false with a 400 in *err; free *r with embed_request_free either way. */
bool embed_parse(const char *body, size_t len, bool oai, int32_t n_vocab, int32_t n_embd, embed_request *r /* OUT */,
                 oai_error *err /* OUT */);
void embed_request_free(embed_request *r);

/* Base64 (RFC 4648, padded) of n floats as little-endian float32: a
 * malloc'd NUL-terminated string, or NULL on OOM. */
char *embed_base64_f32(const float *v, size_t n);

/* Answers POST /v1/embeddings (oai) or /embedding with the full body. */
enum MHD_Result embed_handle(server *s, struct MHD_Connection *c, const char *body, size_t len, bool oai,
                             int *status /* OUT: HTTP status for the log */);

#endif
