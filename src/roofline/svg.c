/*
 * svg.c - the roofline chart as a standalone SVG file, written by kite.
 *
 * Log-log axes: arithmetic intensity (FLOP/byte) across, performance
 * (GFLOP/s) up.  Roofs: the bandwidth line (and, dashed, the weight type's
 * effective bandwidth when the profile has one below it), capped by each compute peak (FP32,
 * BF16, INT8) as horizontal lines.  Every op with FLOPs and bytes is a
 * labelled point at (intensity, flops / predicted time): circles for
 * prefill, squares for decode.  Text is XML-escaped; every attribute is
 * quoted; the output is well-formed XML (test_roofline.c checks it).
 *
 * Thread safety: reentrant.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "kite.h"
#include "roofline/roofline.h"

#define W 960.0
#define H 640.0
#define ML 80.0  /* margins */
#define MR 200.0
#define MT 40.0
#define MB 60.0

typedef struct axes {
    double x0, x1, y0, y1; /* log10 ranges */
} axes;

static double px(const axes *a, double v) { return ML + (log10(v) - a->x0) / (a->x1 - a->x0) * (W - ML - MR); }
static double py(const axes *a, double v) { return H - MB - (log10(v) - a->y0) / (a->y1 - a->y0) * (H - MT - MB); }

static void esc(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if ((unsigned char)*s >= 0x20) fputc(*s, f);
        }
    }
}

static bool plotted(const rl_op *o) { return o->flops > 0 && isfinite(o->intensity) && o->time > 0; }

/* A roof: bandwidth `bw` (B/s) capped at `peak` (FLOP/s), from x0 to x1. */
static void roof(FILE *f, const axes *a, double bw, double peak, const char *color, const char *label, bool dash) {
    double xr = peak / bw; /* ridge */
    double xs = pow(10, a->x0), xe = pow(10, a->x1);
    double ys = bw * xs;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", color,
            dash ? " stroke-dasharray=\"6,4\"" : "");
    if (ys < pow(10, a->y0)) { /* start where the slope enters the plot */
        xs = pow(10, a->y0) / bw;
        ys = pow(10, a->y0);
    }
    if (xr > xs) fprintf(f, "%.1f,%.1f ", px(a, xs), py(a, ys));
    if (xr > xs && xr < xe) fprintf(f, "%.1f,%.1f ", px(a, xr), py(a, peak));
    fprintf(f, "%.1f,%.1f\"/>\n", px(a, xe), py(a, xr < xe ? peak : bw * xe));
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"%s\">", px(a, xe) + 6, py(a, peak) + 4, color);
    esc(f, label);
    fprintf(f, "</text>\n");
}

int rl_svg_write(const char *path, const rl_shape *sh, const rl_hw *hw, const rl_setting *st, const rl_result *r) {
    double imin = INFINITY, imax = 0, pmin = INFINITY;
    double pmax = fmax(hw->fp32_gflops, fmax(hw->bf16_gflops, hw->int8_gops)) * 1e9;
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < r->ph[p].n_ops; i++) {
            const rl_op *o = &r->ph[p].ops[i];
            if (!plotted(o)) continue;
            imin = fmin(imin, o->intensity);
            imax = fmax(imax, o->intensity);
            pmin = fmin(pmin, o->flops / o->time);
        }
    if (!isfinite(imin)) imin = imax = 1, pmin = pmax / 1000;
    axes a = {floor(log10(imin)) - 0.5, ceil(log10(fmax(imax, 4 * pmax / (hw->mem_bw_gbs * 1e9)))) + 0.5,
              floor(log10(pmin)) - 0.5, ceil(log10(pmax)) + 0.3};
    FILE *f = fopen(path, "wb");
    if (!f) return err_set(KITE_E_IO, "%s: cannot write SVG", path);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\">\n", W, H, W, H);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">", W / 2);
    char title[512];
    snprintf(title, sizeof title, "roofline: %s (%s weights, atype %s, batch %lld, prompt %lld) on %s", sh->name,
             dtype_name(sh->wtype), rl_atype_name(st->atype), (long long)st->batch, (long long)st->prompt, hw->name);
    esc(f, title);
    fprintf(f, "</text>\n");
    /* grid and decade labels */
    for (int e = (int)ceil(a.x0); e <= (int)floor(a.x1); e++) {
        double x = px(&a, pow(10, e));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, MT, x, H - MB);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">1e%d</text>\n", x,
                H - MB + 16, e);
    }
    for (int e = (int)ceil(a.y0); e <= (int)floor(a.y1); e++) {
        double y = py(&a, pow(10, e));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, y, W - MR, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">1e%d</text>\n", ML - 6, y + 4,
                e - 9);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", ML, MT,
            W - ML - MR, H - MT - MB);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" text-anchor=\"middle\">arithmetic intensity "
               "(FLOP/byte)</text>\n", (ML + W - MR) / 2, H - 18);
    fprintf(f, "<text x=\"18\" y=\"%.1f\" font-size=\"13\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">"
               "performance (GFLOP/s)</text>\n",
            (MT + H - MB) / 2, (MT + H - MB) / 2);
    /* roofs, clipped to the plot */
    fprintf(f, "<clipPath id=\"plot\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n<g "
               "clip-path=\"url(#plot)\">\n", ML, MT, W - ML - MR, H - MT - MB);
    double bw = hw->mem_bw_gbs * 1e9;
    char lab[128];
    snprintf(lab, sizeof lab, "FP32 %.0f GFLOP/s", hw->fp32_gflops);
    roof(f, &a, bw, hw->fp32_gflops * 1e9, "#1f77b4", lab, false);
    if (hw->bf16_gflops > 0) {
        snprintf(lab, sizeof lab, "BF16 %.0f GFLOP/s", hw->bf16_gflops);
        roof(f, &a, bw, hw->bf16_gflops * 1e9, "#2ca02c", lab, false);
    }
    if (hw->int8_gops > 0) {
        snprintf(lab, sizeof lab, "INT8 %.0f GOP/s", hw->int8_gops);
        roof(f, &a, bw, hw->int8_gops * 1e9, "#9467bd", lab, false);
    }
    if (sh->wtype < KITE_DTYPE_COUNT && hw->kern_gbs[sh->wtype] > 0 && hw->kern_gbs[sh->wtype] < hw->mem_bw_gbs) {
        snprintf(lab, sizeof lab, "%s effective %.1f GB/s", dtype_name(sh->wtype), hw->kern_gbs[sh->wtype]);
        roof(f, &a, hw->kern_gbs[sh->wtype] * 1e9, rl_atype_peak(hw, st->atype), "#ff7f0e", lab, true);
    }
    fprintf(f, "</g>\n");
    snprintf(lab, sizeof lab, "DRAM %.1f GB/s", hw->mem_bw_gbs);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"black\">", ML + 8, H - MB - 8);
    esc(f, lab);
    fprintf(f, "</text>\n");
    /* points */
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < r->ph[p].n_ops; i++) {
            const rl_op *o = &r->ph[p].ops[i];
            if (!plotted(o)) continue;
            double x = px(&a, o->intensity), y = py(&a, o->flops / o->time);
            if (p == RL_PREFILL)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#d62728\"/>\n", x, y);
            else
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#17becf\"/>\n", x - 4, y - 4);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" transform=\"rotate(-25 %.1f %.1f)\">", x + 6,
                    y - 4, x + 6, y - 4);
            esc(f, o->name);
            fprintf(f, "</text>\n");
        }
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#d62728\"/><text x=\"%.1f\" y=\"%.1f\" "
               "font-size=\"12\">prefill op</text>\n", W - MR + 16, H - MB - 40, W - MR + 26, H - MB - 36);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#17becf\"/><text x=\"%.1f\" y=\"%.1f\" "
               "font-size=\"12\">decode op</text>\n", W - MR + 12, H - MB - 24, W - MR + 26, H - MB - 16);
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) return err_set(KITE_E_IO, "%s: write failed", path);
    return KITE_OK;
}
