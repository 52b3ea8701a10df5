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
#define MR 24.0
#define MT 40.0
#define MB 60.0
#define FS_POINT 10.0 /* font size of op labels */
#define CHAR_W 0.56   /* average glyph width of sans-serif, in font sizes (for label boxes) */
#define MAX_BOXES 160

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

/* Occupied rectangles (labels, markers, legend): a label goes where it hits none. */
typedef struct box {
    double x0, y0, x1, y1;
} box;

typedef struct layout {
    box b[MAX_BOXES];
    int n;
} layout;

static void occupy(layout *l, double x0, double y0, double x1, double y1) {
    if (l->n < MAX_BOXES) l->b[l->n++] = (box){x0, y0, x1, y1};
}

static bool free_at(const layout *l, double x0, double y0, double x1, double y1) {
    if (x0 < ML + 2 || x1 > W - MR - 2 || y0 < MT + 2 || y1 > H - MB - 2) return false;
    for (int i = 0; i < l->n; i++)
        if (x0 < l->b[i].x1 && l->b[i].x0 < x1 && y0 < l->b[i].y1 && l->b[i].y0 < y1) return false;
    return true;
}

static double text_w(const char *s, double fs) { return (double)strlen(s) * fs * CHAR_W; }

/* "1e3" -> "1000", "1e-2" -> "0.01": decade tick labels in plain numbers up to 1e5. */
static void decade(char *buf, size_t n, int e) {
    if (e >= 0 && e <= 5) snprintf(buf, n, "%.0f", pow(10, e));
    else if (e < 0 && e >= -4) snprintf(buf, n, "%.*f", -e, pow(10, e));
    else snprintf(buf, n, "1e%d", e);
}

/* A roof: bandwidth `bw` (B/s) capped at `peak` (FLOP/s), from x0 to x1. */
static void roof_line(FILE *f, const axes *a, double bw, double peak, const char *color, bool dash) {
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
}

/* The label of a compute roof: inside the plot at its right end, just above the line (below it
 * when that place is taken by another roof's label). */
static void roof_label(FILE *f, layout *l, const axes *a, double peak, const char *color, const char *label) {
    const double w = text_w(label, 12), x1 = W - MR - 6, y = py(a, peak);
    double base = y - 5;
    if (!free_at(l, x1 - w, base - 11, x1, base + 2)) base = y + 15;
    occupy(l, x1 - w, base - 11, x1, base + 2);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"%s\" text-anchor=\"end\">", x1, base, color);
    esc(f, label);
    fprintf(f, "</text>\n");
}

/* The label of a bandwidth slope: along the line, below it, at the first of a few places between
 * where the line enters the plot and its ridge (or the plot's right edge) that is free of markers
 * and labels (else the first). */
static void slope_label(FILE *f, layout *l, const axes *a, double bw, double peak, const char *color,
                        const char *label) {
    double xs = pow(10, a->x0);
    if (bw * xs < pow(10, a->y0)) xs = pow(10, a->y0) / bw;
    const double xe = fmin(peak / bw, pow(10, a->x1));
    if (!(xe > xs)) return;
    const double x0 = px(a, xs), y0 = py(a, bw * xs), x1 = px(a, xe), y1 = py(a, bw * xe);
    const double ang = atan2(y1 - y0, x1 - x0) * 180.0 / M_PI, rad = ang * M_PI / 180.0;
    const double w = text_w(label, 12), c = fabs(cos(rad)), s = fabs(sin(rad));
    const double hw = (w * c + 12 * s) / 2, hh = (w * s + 12 * c) / 2; /* half the rotated text's bounding box */
    static const double at[] = {0.25, 0.12, 0.4, 0.55, 0.7, 0.85};
    const int n_at = (int)(sizeof at / sizeof at[0]);
    double x = 0, y = 0, cx = 0, cy = 0;
    for (int i = 0, pick = -1; pick < 0; i++) { /* the first free place, else (i == n_at) the first */
        const double t = at[i < n_at ? i : 0];
        const double xm = pow(10, log10(xs) + t * (log10(xe) - log10(xs)));
        x = px(a, xm);
        y = py(a, bw * xm);
        cx = x - 16 * sin(rad);
        cy = y + 16 * cos(rad) - 4;
        if (i >= n_at || free_at(l, cx - hw, cy - hh, cx + hw, cy + hh)) pick = i;
    }
    occupy(l, cx - hw, cy - hh, cx + hw, cy + hh); /* op labels keep off it */
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"%s\" text-anchor=\"middle\" "
               "transform=\"rotate(%.1f %.1f %.1f) translate(0 16)\">", x, y, color, ang, x, y);
    esc(f, label);
    fprintf(f, "</text>\n");
}

/* Ops of one phase drawn at (nearly) the same place share one label. */
typedef struct cluster {
    double x, y;
    int phase;
    char names[160];
    int n;
} cluster;

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
    layout lay = {.n = 0};
    char buf[64];
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\">\n", W, H, W, H);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">", (ML + W - MR) / 2);
    char title[512];
    snprintf(title, sizeof title, "Roofline: %s (%s weights, %s activations, batch %lld, prompt %lld) on %s",
             sh->name, dtype_name(sh->wtype), rl_atype_name(st->atype), (long long)st->batch, (long long)st->prompt,
             hw->name);
    esc(f, title);
    fprintf(f, "</text>\n");
    /* grid and decade labels */
    for (int e = (int)ceil(a.x0); e <= (int)floor(a.x1); e++) {
        double x = px(&a, pow(10, e));
        decade(buf, sizeof buf, e);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, MT, x, H - MB);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", x, H - MB + 16,
                buf);
    }
    for (int e = (int)ceil(a.y0); e <= (int)floor(a.y1); e++) {
        double y = py(&a, pow(10, e));
        decade(buf, sizeof buf, e - 9);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, y, W - MR, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n", ML - 6, y + 4, buf);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", ML, MT,
            W - ML - MR, H - MT - MB);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" text-anchor=\"middle\">arithmetic intensity "
               "(FLOP/byte)</text>\n", (ML + W - MR) / 2, H - 18);
    fprintf(f, "<text x=\"18\" y=\"%.1f\" font-size=\"13\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">"
               "performance (GFLOP/s)</text>\n",
            (MT + H - MB) / 2, (MT + H - MB) / 2);
    /* legend, top left inside the plot */
    const double lx = ML + 10, ly = MT + 10;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"118\" height=\"42\" fill=\"white\" stroke=\"#bbb\"/>\n", lx, ly);
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#d62728\"/><text x=\"%.1f\" y=\"%.1f\" "
               "font-size=\"12\">prefill op</text>\n", lx + 12, ly + 13, lx + 24, ly + 17);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#17becf\"/><text x=\"%.1f\" y=\"%.1f\" "
               "font-size=\"12\">decode op</text>\n", lx + 8, ly + 27, lx + 24, ly + 35);
    occupy(&lay, lx, ly, lx + 118, ly + 42);
    /* roofs, clipped to the plot */
    fprintf(f, "<clipPath id=\"plot\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n<g "
               "clip-path=\"url(#plot)\">\n", ML, MT, W - ML - MR, H - MT - MB);
    const double bw = hw->mem_bw_gbs * 1e9;
    struct {
        double peak;
        const char *color;
        char label[64];
    } roofs[3];
    int n_roofs = 0;
    roofs[n_roofs].peak = hw->fp32_gflops * 1e9;
    roofs[n_roofs].color = "#1f77b4";
    snprintf(roofs[n_roofs++].label, sizeof roofs[0].label, "FP32 %.0f GFLOP/s", hw->fp32_gflops);
    if (hw->bf16_gflops > 0) {
        roofs[n_roofs].peak = hw->bf16_gflops * 1e9;
        roofs[n_roofs].color = "#2ca02c";
        snprintf(roofs[n_roofs++].label, sizeof roofs[0].label, "BF16 %.0f GFLOP/s", hw->bf16_gflops);
    }
    if (hw->int8_gops > 0) {
        roofs[n_roofs].peak = hw->int8_gops * 1e9;
        roofs[n_roofs].color = "#9467bd";
        snprintf(roofs[n_roofs++].label, sizeof roofs[0].label, "INT8 %.0f GOP/s", hw->int8_gops);
    }
    for (int i = 0; i < n_roofs; i++) roof_line(f, &a, bw, roofs[i].peak, roofs[i].color, false);
    const bool eff = sh->wtype < KITE_DTYPE_COUNT && hw->kern_gbs[sh->wtype] > 0 &&
                     hw->kern_gbs[sh->wtype] < hw->mem_bw_gbs;
    const double eff_bw = eff ? hw->kern_gbs[sh->wtype] * 1e9 : 0, eff_peak = rl_atype_peak(hw, st->atype);
    if (eff) roof_line(f, &a, eff_bw, eff_peak, "#ff7f0e", true);
    fprintf(f, "</g>\n");
    /* where the markers go (no label may cover them), and one label per cluster of them */
    cluster cl[2 * RL_MAX_OPS];
    int n_cl = 0;
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < r->ph[p].n_ops; i++) {
            const rl_op *o = &r->ph[p].ops[i];
            if (!plotted(o)) continue;
            const double x = px(&a, o->intensity), y = py(&a, o->flops / o->time);
            occupy(&lay, x - 4, y - 4, x + 4, y + 4);
            int c = 0;
            while (c < n_cl && !(cl[c].phase == p && fabs(cl[c].x - x) < 7 && fabs(cl[c].y - y) < 7)) c++;
            if (c == n_cl) cl[n_cl++] = (cluster){.x = x, .y = y, .phase = p};
            const size_t k = strlen(cl[c].names);
            if (cl[c].n < 4)
                snprintf(cl[c].names + k, sizeof cl[c].names - k, "%s%s", cl[c].n ? ", " : "", o->name);
            else if (cl[c].n == 4)
                snprintf(cl[c].names + k, sizeof cl[c].names - k, " ...");
            cl[c].n++;
        }
    /* the compute roofs' flat parts: no label may lie across one (a roof's own label sits just
     * above or below it, clear of the line) */
    for (int i = 0; i < n_roofs; i++) {
        const double xr = px(&a, fmax(roofs[i].peak / bw, pow(10, a.x0))), y = py(&a, roofs[i].peak);
        if (xr < W - MR) occupy(&lay, xr, y - 1, W - MR, y + 1);
    }
    /* roof labels from the highest roof down, so that of two close roofs the upper one's label
     * goes above it and the lower one's below; equal peaks (BF16 = FP32 on many CPUs) share one
     * line, so they share a label */
    int order[3] = {0, 1, 2};
    for (int i = 0; i < n_roofs; i++)
        for (int j = i + 1; j < n_roofs; j++)
            if (roofs[order[j]].peak > roofs[order[i]].peak) {
                const int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    for (int oi = 0; oi < n_roofs; oi++) {
        const int i = order[oi];
        char lab[160];
        snprintf(lab, sizeof lab, "%s", roofs[i].label);
        bool dup = false;
        for (int j = 0; j < i; j++) dup |= roofs[j].peak == roofs[i].peak;
        if (dup) continue;
        for (int j = i + 1; j < n_roofs; j++)
            if (roofs[j].peak == roofs[i].peak) {
                const size_t k = strlen(lab);
                snprintf(lab + k, sizeof lab - k, " = %.4s", roofs[j].label);
            }
        roof_label(f, &lay, &a, roofs[i].peak, roofs[i].color, lab);
    }
    char lab[128];
    snprintf(lab, sizeof lab, "DRAM %.1f GB/s", hw->mem_bw_gbs);
    slope_label(f, &lay, &a, bw, roofs[0].peak, "black", lab);
    if (eff) {
        snprintf(lab, sizeof lab, "%s effective %.1f GB/s", dtype_name(sh->wtype), hw->kern_gbs[sh->wtype]);
        slope_label(f, &lay, &a, eff_bw, eff_peak, "#ff7f0e", lab);
    }
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < r->ph[p].n_ops; i++) {
            const rl_op *o = &r->ph[p].ops[i];
            if (!plotted(o)) continue;
            const double x = px(&a, o->intensity), y = py(&a, o->flops / o->time);
            if (p == RL_PREFILL)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#d62728\"/>\n", x, y);
            else
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#17becf\"/>\n", x - 4, y - 4);
        }
    /* candidate places around the marker (text baseline left at x + dx, y + dy), nearest first;
     * beyond the first ring a thin leader line joins label and marker */
    static const double cand[][2] = {{7, -6},   {7, 14},   {-7, -6},  {-7, 14},  {-1, -10}, {-1, 22},
                                     {7, -20},  {7, 28},   {-7, -20}, {-7, 28},  {7, -34},  {7, 42},
                                     {-7, -34}, {-7, 42},  {7, -48},  {7, 56},   {-7, -48}, {-7, 56},
                                     {7, -62},  {7, 70},   {-7, -62}, {-7, 70},  {7, -80},  {7, 88}};
    const int n_cand = (int)(sizeof cand / sizeof cand[0]);
    for (int c = 0; c < n_cl; c++) {
        const double w = text_w(cl[c].names, FS_POINT);
        int k = 0;
        double tx = 0, ty = 0;
        for (; k < n_cand; k++) {
            tx = cand[k][0] < 0 ? cl[c].x + cand[k][0] - w : cand[k][0] == -1 ? cl[c].x - w / 2 : cl[c].x + cand[k][0];
            ty = cl[c].y + cand[k][1];
            if (free_at(&lay, tx - 1, ty - FS_POINT, tx + w + 1, ty + 3)) break;
        }
        if (k == n_cand) { /* nowhere free: the first place */
            k = 0;
            tx = cl[c].x + cand[0][0];
            ty = cl[c].y + cand[0][1];
        }
        occupy(&lay, tx - 1, ty - FS_POINT, tx + w + 1, ty + 3);
        if (k >= 6) {
            const double ex = tx < cl[c].x ? tx + w : tx, ey = ty < cl[c].y ? ty + 2 : ty - FS_POINT;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" stroke-width=\"0.7\"/>\n",
                    cl[c].x, cl[c].y, ex, ey);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" fill=\"%s\">", tx, ty, FS_POINT,
                cl[c].phase == RL_PREFILL ? "#8c1a1b" : "#0e6f7a");
        esc(f, cl[c].names);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) return err_set(KITE_E_IO, "%s: write failed", path);
    return KITE_OK;
}
