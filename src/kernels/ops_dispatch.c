/*
 * ops_dispatch.c - the element-wise kernel tables (ops_simd.h) and the
 * choice of one by kernel level: scalar -> references, avx2 -> the avx2
 * file, avx512 and above -> the avx512 file.  The active table follows
 * kern_table()->level (so KITE_CPU_LEVEL caps it) and is cached in an
 * atomic pointer after the first call (every thread computes the same
 * value, so a race only repeats the lookup).  Building with
 * -DKITE_ELT_OPS_REF pins every level to the references (A/B benchmarks of
 * docs/kernels.md, "Element-wise ops").
 * Thread safety: the tables are constant.
 */
#include <stdatomic.h>

#include "kernels/ops_simd.h"

#if defined(__x86_64__) || defined(__i386__)
#define OPS_X86 1
#endif

static const kern_elt_ops ops_scalar = {
    .name = "scalar", .rmsnorm = kern_rmsnorm_ref, .layernorm = kern_layernorm_ref, .softmax = kern_softmax_ref,
    .swiglu = kern_swiglu_ref, .gelu = kern_gelu_ref, .add = kern_add_ref, .exp = kern_exp_ref,
};

#if defined(OPS_X86) && !defined(KITE_ELT_OPS_REF)
static const kern_elt_ops ops_avx2 = {
    .name = "avx2", .rmsnorm = kern_rmsnorm_avx2, .layernorm = kern_layernorm_avx2, .softmax = kern_softmax_avx2,
    .swiglu = kern_swiglu_avx2, .gelu = kern_gelu_avx2, .add = kern_add_avx2, .exp = kern_exp_avx2,
};
static const kern_elt_ops ops_avx512 = {
    .name = "avx512", .rmsnorm = kern_rmsnorm_avx512, .layernorm = kern_layernorm_avx512,
    .softmax = kern_softmax_avx512, .swiglu = kern_swiglu_avx512, .gelu = kern_gelu_avx512, .add = kern_add_avx512,
    .exp = kern_exp_avx512,
};
#endif

const kern_elt_ops *kern_elt_ops_for_level(kern_level level) {
    if ((unsigned)level >= KERN_LEVEL_COUNT || level > kern_level_max()) return NULL;
#if defined(OPS_X86) && !defined(KITE_ELT_OPS_REF)
    if (level >= KERN_LEVEL_AVX512) return &ops_avx512;
    if (level >= KERN_LEVEL_AVX2) return &ops_avx2;
#endif
    return &ops_scalar;
}

static _Atomic(const kern_elt_ops *) g_active;

const kern_elt_ops *kern_elt_ops_active(void) {
    const kern_elt_ops *o = atomic_load_explicit(&g_active, memory_order_acquire);
    if (o) return o;
    o = kern_elt_ops_for_level(kern_table()->level);
    if (!o) o = &ops_scalar;
    atomic_store_explicit(&g_active, o, memory_order_release);
    return o;
}
