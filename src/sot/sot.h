/*
 * sot.h - Skeleton-of-Thought (issue 6 item 6; docs/sot.md).
 *
 * DESIGN
 *   Two stages over the serving engine (src/engine/engine.h):
 *     1. skeleton: one request whose prompt asks for a short numbered list of
 *        the answer's points;
 *     2. expansion: one request per parsed point, all submitted at once so
 *        the engine decodes them in the same batches (continuous batching),
 *        each prompt holding the question, the whole skeleton and the point
 *        to write.
 *   The answer is the points in skeleton order, each "N. <point> <expansion>".
 *   Router: when the skeleton does not parse into at least SOT_MIN_POINTS
 *   consecutive numbered points, the question is answered by plain decoding
 *   (one request with the plain prompt), and the result says so.
 *
 *   Prompts are templates with placeholders {question}, {skeleton},
 *   {index} and {point}; the defaults are in sot.c and docs/sot.md, and
 *   every one can be overridden.  When `chat_family` >= 0 each prompt is
 *   wrapped as a user turn in that chat template (src/chat) before
 *   tokenization; otherwise it is used as raw text.
 *
 * OWNERSHIP / THREADS
 *   sot_run blocks the calling thread until the answer is assembled; the
 *   engine's thread does the decoding.  Results are malloc'd (sot_result_free).
 */
#ifndef KITE_SOT_SOT_H
#define KITE_SOT_SOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kite.h"
#include "engine/engine.h"

#define SOT_MIN_POINTS 2
#define SOT_MAX_POINTS 16

typedef struct sot_params {
    const char *skeleton_prompt; /* NULL: the default; placeholders {question} */
    const char *point_prompt;    /* NULL: the default; {question} {skeleton} {index} {point} */
    const char *plain_prompt;    /* NULL: the default ("{question}"): the router's fallback */
    const char *skeleton_text;   /* non-NULL: use this skeleton instead of generating one (tests, scripting) */
    int32_t max_points;          /* at most this many points are expanded; 0 = 10 */
    int32_t skeleton_tokens;     /* token limit of the skeleton; 0 = 200 */
    int32_t point_tokens;        /* token limit of each expansion; 0 = 128 */
    int32_t plain_tokens;        /* token limit of the fallback answer; 0 = 512 */
    int chat_family;             /* enum chat_family, or -1: raw text prompts */
    kite_sampler_params sampling;
    /* Polled about every SOT_POLL_MS while sot_run waits for the engine (NULL:
     * never): true cancels every request still running and sot_run returns
     * KITE_E_STATE ("stopped").  The server passes its request deadline and the
     * drain deadline (tools/http/gen.c).  Called on sot_run's thread. */
    bool (*should_stop)(void *arg);
    void *stop_arg;
    uint64_t client;             /* engine_req.client of every request (fair queueing; 0 = default) */
} sot_params;

#define SOT_POLL_MS 20

typedef struct sot_point {
    char *title;                 /* the skeleton's text of the point */
    char *text;                  /* its expansion */
    int32_t n_gen;               /* tokens generated for it */
} sot_point;

typedef struct sot_result {
    bool fallback;               /* the skeleton did not parse: `answer` is plain decoding */
    char *skeleton;              /* generated (or given) skeleton text */
    sot_point *points;           /* [n_points], skeleton order */
    int32_t n_points;
    char *answer;                /* assembled answer */
    int32_t n_gen_total;         /* tokens generated over all requests */
    double skeleton_s;           /* wall time of stage 1 */
    double expand_s;             /* wall time of stage 2 (or of the fallback) */
} sot_result;

sot_params sot_default_params(void);

/* Answers `question` with Skeleton-of-Thought on engine e (serving model m).
 * Returns a kite_status; on success *out holds the result. */
int sot_run(engine *e, const kite_model *m, const char *question, const sot_params *p, sot_result *out /* OUT */);
void sot_result_free(sot_result *r);

/* Parses a skeleton: lines "N. text" or "N) text" (leading spaces, Markdown
 * bold/bullets around the number tolerated) numbered 1, 2, 3, ... in order;
 * parsing stops at the first line that breaks the sequence after at least
 * one point.  Writes up to max titles (malloc'd, trimmed) to titles[] and
 * returns how many; 0 when the text has no point 1. */
int32_t sot_parse_skeleton(const char *text, char **titles, int32_t max);

/* Replaces {question}, {skeleton}, {index}, {point} in tmpl (unknown braces
 * are copied); any value may be NULL (replaced by "").  Malloc'd result, or
 * NULL when out of memory. */
char *sot_fill(const char *tmpl, const char *question, const char *skeleton, int32_t index, const char *point);

#endif
