/*
 * tune_attn.h - `kite tune --attn-calib TEXT`: FlashDecoding++ unified-max
 * calibration (tune_attn.c), and the text reader `kite bench --attn-ctx`
 * shares with it.
 */
#ifndef KITE_CLI_TUNE_ATTN_H
#define KITE_CLI_TUNE_ATTN_H

#include <stddef.h>
#include <stdint.h>

#define ATTN_CALIB_MARGIN 8.0f /* the window phi is centred for is ATTN_PHI_RANGE minus this (longer contexts) */
#define ATTN_CALIB_TOKENS 1024 /* default tokens of calibration text */

/* Runs MODEL over the first n_tokens tokens of the text in text_path
 * (split-KV, recording each row's range of chunk maxima per layer and
 * head), picks a unified maximum per layer, or per head where that keeps
 * more rows inside the window, prints the statistics and writes a copy of
 * MODEL with kite.attention.unified_max to out_path (may be model_path: the
 * file is replaced atomically).  Returns the process exit status. */
int tune_attn_calib(const char *model_path, const char *text_path, const char *out_path, int64_t n_tokens,
                    int n_threads);

/* Reads a whole file into a NUL-terminated buffer (caller frees), or NULL
 * with a message on stderr naming cmd and path. */
char *tune_attn_read_text(const char *cmd, const char *path, size_t *len);

#endif
