/*
 * hw.c - hardware profiles of the roofline model: built-in entries and the
 * text format (docs/roofline.md).
 *
 * FORMAT
 *   One "key = value" per line; '#' starts a comment; blank lines ignored.
 *   Keys: name (rest of the line), mem_bw_gbs, fp32_gflops, bf16_gflops,
 *   int8_gops, attn_gflops, attn_call_us, elem_gflops, launch_us, threads,
 *   kern_gbs.<type> (e.g. kern_gbs.q8_0: the effective bandwidth of that
 *   weight type, weight GB/s the decode matmul streams) and
 *   kern_call_us.<type> (fixed microseconds per matmul call of that type).  mem_bw_gbs and
 *   fp32_gflops are required; unknown keys are an error (typos must not pass
 *   silently).
 *
 * BUILT-INS
 *   Dense (no sparsity) peaks from the vendors' data sheets: A100 SXM4 80GB
 *   (2039 GB/s HBM2e, 19.5 TFLOP/s FP32, 312 BF16 tensor, 624 INT8 TOPS),
 *   H100 SXM5 (3350 GB/s, 67 / 989 / 1979), H200 SXM (4800 GB/s, same
 *   compute as H100), RTX 4090 (1008 GB/s, 82.6 FP32, 165.2 BF16 tensor with
 *   FP32 accumulate, 660.6 INT8 TOPS).  ddr5-desktop is not a product: two
 *   channels of DDR5-5600 (2 * 8 B * 5.6 GT/s = 89.6 GB/s theoretical) and 8
 *   cores at 4.5 GHz with two 256-bit FMA pipes (8 * 4.5 * 2 * 8 * 2 = 1152
 *   GFLOP/s FP32; BF16 the same, no native BF16 matmul; INT8 with AVX-VNNI
 *   vpdpbusd, 2 * 32 MACs per cycle: 4608 GOP/s).  Built-ins carry no kernel
 *   rates (kite's kernels do not run on GPUs), so bandwidth alone bounds
 *   their memory time.
 *
 * Thread safety: reentrant; the built-in table is constant.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "kite.h"
#include "roofline/roofline.h"

static const rl_hw builtins[] = {
    {.name = "A100", .mem_bw_gbs = 2039, .fp32_gflops = 19500, .bf16_gflops = 312000, .int8_gops = 624000},
    {.name = "H100", .mem_bw_gbs = 3350, .fp32_gflops = 67000, .bf16_gflops = 989000, .int8_gops = 1979000},
    {.name = "H200", .mem_bw_gbs = 4800, .fp32_gflops = 67000, .bf16_gflops = 989000, .int8_gops = 1979000},
    {.name = "RTX4090", .mem_bw_gbs = 1008, .fp32_gflops = 82600, .bf16_gflops = 165200, .int8_gops = 660600},
    {.name = "ddr5-desktop", .mem_bw_gbs = 89.6, .fp32_gflops = 1152, .bf16_gflops = 1152, .int8_gops = 4608},
};

const rl_hw *rl_hw_builtin(const char *name) {
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
        if (!strcasecmp(name, builtins[i].name)) return &builtins[i];
        if (!strcasecmp(name, "rtx-4090") && !strcmp(builtins[i].name, "RTX4090")) return &builtins[i];
    }
    return NULL;
}

const char *rl_hw_builtin_list(void) { return "A100|H100|H200|RTX4090|ddr5-desktop"; }

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) s[--n] = 0;
    return s;
}

int rl_hw_parse(const char *text, const char *what, rl_hw *out) {
    rl_hw hw;
    memset(&hw, 0, sizeof hw);
    snprintf(hw.name, sizeof hw.name, "%s", what);
    int line_no = 0;
    const char *p = text;
    while (*p) {
        char line[512];
        size_t n = strcspn(p, "\n");
        line_no++;
        if (n >= sizeof line) return err_set(KITE_E_FORMAT, "%s:%d: line too long", what, line_no);
        memcpy(line, p, n);
        line[n] = 0;
        p += n + (p[n] == '\n');
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *l = trim(line);
        if (!*l) continue;
        char *eq = strchr(l, '=');
        if (!eq) return err_set(KITE_E_FORMAT, "%s:%d: expected 'key = value'", what, line_no);
        *eq = 0;
        char *key = trim(l), *val = trim(eq + 1);
        if (!strcmp(key, "name")) {
            snprintf(hw.name, sizeof hw.name, "%s", val);
            continue;
        }
        char *end;
        errno = 0;
        double v = strtod(val, &end);
        if (end == val || *end || errno || !(v >= 0) || v > 1e12)
            return err_set(KITE_E_FORMAT, "%s:%d: %s: '%s' is not a number >= 0", what, line_no, key, val);
        if (!strcmp(key, "mem_bw_gbs"))
            hw.mem_bw_gbs = v;
        else if (!strcmp(key, "fp32_gflops"))
            hw.fp32_gflops = v;
        else if (!strcmp(key, "bf16_gflops"))
            hw.bf16_gflops = v;
        else if (!strcmp(key, "int8_gops"))
            hw.int8_gops = v;
        else if (!strcmp(key, "attn_gflops"))
            hw.attn_gflops = v;
        else if (!strcmp(key, "elem_gflops"))
            hw.elem_gflops = v;
        else if (!strcmp(key, "launch_us"))
            hw.launch_us = v;
        else if (!strcmp(key, "threads"))
            hw.threads = (int)v;
        else if (!strcmp(key, "attn_call_us"))
            hw.attn_call_us = v;
        else if (!strncmp(key, "kern_gbs.", 9) && dtype_from_name(key + 9) >= 0)
            hw.kern_gbs[dtype_from_name(key + 9)] = v;
        else if (!strncmp(key, "kern_call_us.", 13) && dtype_from_name(key + 13) >= 0)
            hw.kern_call_us[dtype_from_name(key + 13)] = v;
        else if (!strncmp(key, "gemm_gops.", 10) && dtype_from_name(key + 10) >= 0)
            hw.gemm_gops[dtype_from_name(key + 10)] = v;
        else if (!strcmp(key, "measured_at"))
            hw.measured_at = v;
        else if (!strcmp(key, "avail_pct"))
            hw.avail_pct = v;
        else
            return err_set(KITE_E_FORMAT, "%s:%d: unknown key '%s'", what, line_no, key);
    }
    if (hw.mem_bw_gbs <= 0 || hw.fp32_gflops <= 0)
        return err_set(KITE_E_FORMAT, "%s: mem_bw_gbs and fp32_gflops are required and > 0", what);
    *out = hw;
    return KITE_OK;
}

int rl_hw_load(const char *path, rl_hw *hw) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(KITE_E_IO, "%s: cannot open hardware profile", path);
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    bool big = !feof(f);
    fclose(f);
    if (big) return err_set(KITE_E_FORMAT, "%s: hardware profile larger than %zu bytes", path, sizeof buf - 1);
    buf[n] = 0;
    if (strlen(buf) != n) return err_set(KITE_E_FORMAT, "%s: NUL byte in hardware profile", path);
    return rl_hw_parse(buf, path, hw);
}

void rl_hw_write(FILE *f, const rl_hw *hw) {
    fprintf(f, "name = %s\nmem_bw_gbs = %.4g\nfp32_gflops = %.6g\nbf16_gflops = %.6g\nint8_gops = %.6g\n", hw->name,
            hw->mem_bw_gbs, hw->fp32_gflops, hw->bf16_gflops, hw->int8_gops);
    if (hw->attn_gflops > 0) fprintf(f, "attn_gflops = %.4g\n", hw->attn_gflops);
    if (hw->attn_call_us > 0) fprintf(f, "attn_call_us = %.4g\n", hw->attn_call_us);
    if (hw->elem_gflops > 0) fprintf(f, "elem_gflops = %.4g\n", hw->elem_gflops);
    if (hw->launch_us > 0) fprintf(f, "launch_us = %.4g\n", hw->launch_us);
    if (hw->threads > 0) fprintf(f, "threads = %d\n", hw->threads);
    for (int t = 0; t < KITE_DTYPE_COUNT; t++)
        if (hw->kern_gbs[t] > 0) fprintf(f, "kern_gbs.%s = %.4g\n", dtype_name((uint32_t)t), hw->kern_gbs[t]);
    for (int t = 0; t < KITE_DTYPE_COUNT; t++)
        if (hw->kern_call_us[t] > 0)
            fprintf(f, "kern_call_us.%s = %.4g\n", dtype_name((uint32_t)t), hw->kern_call_us[t]);
    for (int t = 0; t < KITE_DTYPE_COUNT; t++)
        if (hw->gemm_gops[t] > 0) fprintf(f, "gemm_gops.%s = %.5g\n", dtype_name((uint32_t)t), hw->gemm_gops[t]);
    if (hw->measured_at > 0) fprintf(f, "measured_at = %.0f\n", hw->measured_at);
    if (hw->avail_pct > 0) fprintf(f, "avail_pct = %.1f\n", hw->avail_pct);
}

int rl_hw_save(const char *path, const rl_hw *hw) {
    FILE *f = fopen(path, "wb");
    if (!f) return err_set(KITE_E_IO, "%s: cannot write hardware profile", path);
    fprintf(f, "# kite roofline hardware profile (docs/roofline.md)\n");
    rl_hw_write(f, hw);
    if (fclose(f) != 0) return err_set(KITE_E_IO, "%s: write failed", path);
    return KITE_OK;
}
