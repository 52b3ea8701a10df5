/*
 * la_gemm_impl.h - the GEMM driver of linalg.c, instantiated once per
 * element type (included twice by linalg.c with LA_T, LA_SFX, LA_UKR,
 * LA_MR, LA_NR, LA_NC defined, which it undefines at the end; no include
 * guard on purpose).
 *
 * Loop order: pc over KC-deep slices (the thread's rows of A packed once per
 * slice into MR-row micro-panels, alpha applied), jc over NC-column panels
 * (B's slice packed into NR-column micro-panels: KC x NC sized for L2), then
 * ir over A's micro-panels (one stays in L1) and jr over B's (streamed from
 * L2).  The narrow MR side is the L1-resident one, the NR = vector side
 * streams: with NR 32 floats a B micro-panel would not fit in L1 beside the
 * rest.  Per element of C the updates come in pc order, so results do not
 * depend on how rows or columns are split among threads.
 */
#define LA_CAT_(a, b) a##b
#define LA_CAT(a, b) LA_CAT_(a, b)
#define LA_FN(name) LA_CAT(name, LA_SFX)

/* op(A)(i, p) for the packers: A is float or LA_T, transposed or not */
static inline LA_T LA_FN(elem_)(const la_src *s, int64_t i, int64_t p) {
    const int64_t off = s->trans ? p * s->ld + i : i * s->ld + p;
    return s->f32 ? (LA_T)((const float *)s->p)[off] : (LA_T)((const LA_T *)s->p)[off];
}

/* A block rows [i0, i0+mc) x cols [p0, p0+kc) -> MR-row panels, times alpha */
static void LA_FN(pack_a_)(LA_T *dst, const la_src *a, int64_t i0, int mc, int64_t p0, int kc, LA_T alpha, int mr) {
    for (int ir = 0; ir < mc; ir += mr) {
        const int mv = mc - ir < mr ? mc - ir : mr;
        for (int k = 0; k < kc; k++) {
            LA_T *d = dst + (size_t)ir * kc + (size_t)k * mr;
            int i = 0;
            for (; i < mv; i++) d[i] = alpha * LA_FN(elem_)(a, i0 + ir + i, p0 + k);
            for (; i < mr; i++) d[i] = 0;
        }
    }
}

/* B slice rows [p0, p0+kc) x cols [j0, j0+nc) -> NR-column panels (B given as op(B)(p, j)) */
static void LA_FN(pack_b_)(LA_T *dst, const la_src *b, int64_t p0, int kc, int64_t j0, int nc, int nr) {
    for (int jr = 0; jr < nc; jr += nr) {
        const int nv = nc - jr < nr ? nc - jr : nr;
        LA_T *d = dst + (size_t)jr * kc;
        if (!b->trans && b->f32 == (sizeof(LA_T) == sizeof(float))) { /* rows of B are contiguous: copy runs */
            for (int k = 0; k < kc; k++) {
                const LA_T *s = (const LA_T *)b->p + (p0 + k) * b->ld + j0 + jr;
                int j = 0;
                for (; j < nv; j++) d[(size_t)k * nr + j] = s[j];
                for (; j < nr; j++) d[(size_t)k * nr + j] = 0;
            }
            continue;
        }
        for (int k = 0; k < kc; k++) {
            int j = 0;
            /* op(B)(p, j) is A-style element (j, p) of the transposed view */
            for (; j < nv; j++) {
                const int64_t off = b->trans ? (j0 + jr + j) * b->ld + (p0 + k) : (p0 + k) * b->ld + (j0 + jr + j);
                d[(size_t)k * nr + j] = b->f32 ? (LA_T)((const float *)b->p)[off] : ((const LA_T *)b->p)[off];
            }
            for (; j < nr; j++) d[(size_t)k * nr + j] = 0;
        }
    }
}

/* C rows [i0, i1) x cols [j0, j1) of the product, one thread, workspace ws
 * (la_gemm_ws_bytes(i1 - i0)). */
static void LA_FN(gemm_region_)(const kern_la_ops *ops, const la_gemm_args *g, int64_t i0, int64_t i1, int64_t j0,
                                int64_t j1, void *ws) {
    const int mr = ops->LA_MR, nr = ops->LA_NR;
    const int64_t mp = (i1 - i0 + mr - 1) / mr * mr; /* rows packed, padded to whole MR panels */
    LA_T *apk = ws, *bpk = apk + (size_t)mp * LA_KC;
    LA_T *c = g->c;
    const LA_T alpha = (LA_T)g->alpha;
    for (int64_t pc = 0; pc < g->k; pc += LA_KC) {
        const int kc = (int)(g->k - pc < LA_KC ? g->k - pc : LA_KC);
        LA_FN(pack_a_)(apk, &g->a, i0, (int)(i1 - i0), pc, kc, alpha, mr);
        for (int64_t jc = j0; jc < j1; jc += LA_NC) {
            const int nc = (int)(j1 - jc < LA_NC ? j1 - jc : LA_NC);
            if (g->lower && i1 - 1 < jc) break; /* every later panel lies above the diagonal */
            LA_FN(pack_b_)(bpk, &g->b, pc, kc, jc, nc, nr);
            for (int64_t ir = 0; ir < i1 - i0; ir += mr) {
                const int mv = (int)(i1 - i0 - ir < mr ? i1 - i0 - ir : mr);
                const int64_t row = i0 + ir;
                for (int jr = 0; jr < nc; jr += nr) {
                    const int nv = nc - jr < nr ? nc - jr : nr;
                    if (g->lower && row + mv - 1 < jc + jr) break; /* this and later tiles lie above the diagonal */
                    ops->LA_UKR(kc, apk + (size_t)ir * kc, bpk + (size_t)jr * kc, c + row * g->ldc + jc + jr, g->ldc,
                                mv, nv);
                }
            }
        }
    }
}

#undef LA_FN
#undef LA_CAT
#undef LA_CAT_
#undef LA_T
#undef LA_SFX
#undef LA_UKR
#undef LA_MR
#undef LA_NR
#undef LA_NC
