/* cpu.c — which SIMD the CPU has and the OS lets us use, and the choice of
 * dot kernel per (type, ISA).
 *
 * A feature is usable only if CPUID advertises it AND the OS saves its
 * register state (XCR0 via xgetbv): YMM needs XCR0 bits 1-2, ZMM and the
 * opmask registers bits 5-7. AMX additionally needs Linux's per-process
 * permission (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA); we only report
 * AMX, we never execute AMX instructions.
 *
 * State: the current ISA is the one piece of process-wide mutable state here
 * (set once from the CPU and env HX_ISA, changed only by hx_isa_set for tests
 * and benchmarks). */
#include "quant/dot.h"
#include "core/core.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HX_X86 1
#endif

#if HX_X86
static uint64_t read_xcr0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

/* Linux: ask for permission to use AMX tile data (XFEATURE_XTILEDATA = 18).
 * Fails on kernels < 5.16 or where the hypervisor hides the state. */
static bool amx_permission(void) {
#ifdef SYS_arch_prctl
    const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}
#endif

hx_cpu_features hx_cpu_detect(void) {
    hx_cpu_features f;
    memset(&f, 0, sizeof f);
#if HX_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    bool osxsave = c & (1u << 27), avx = c & (1u << 28);
    f.fma = c & (1u << 12);
    f.f16c = c & (1u << 29);
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    f.os_avx = avx && (xcr0 & 0x6) == 0x6;
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f.avx2 = b & (1u << 5);
        f.avx512f = b & (1u << 16);
        f.avx512dq = b & (1u << 17);
        f.avx512bw = b & (1u << 30);
        f.avx512vl = b & (1u << 31);
        f.avx512vnni = c & (1u << 11);
        f.amx_tile_advertised = d & (1u << 24);
        unsigned max_sub = a;
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            f.avx_vnni = a & (1u << 4);
        }
    }
    /* XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA) plus the Linux permission */
    f.amx_usable = f.amx_tile_advertised && (xcr0 & (3ull << 17)) == (3ull << 17) && amx_permission();
#endif
    return f;
}

hx_isa hx_isa_best(void) {
    static _Atomic int best = -1; /* a cache of a pure function of the machine */
    int b = atomic_load(&best);
    if (b >= 0) return (hx_isa)b;
    hx_cpu_features f = hx_cpu_detect();
    b = HX_ISA_SCALAR;
    if (f.avx2 && f.fma && f.f16c && f.os_avx) b = HX_ISA_AVX2;
    if (b == HX_ISA_AVX2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.os_avx512) b = HX_ISA_AVX512;
    if (b == HX_ISA_AVX512 && f.avx512vnni) b = HX_ISA_AVX512_VNNI;
    atomic_store(&best, b);
    return (hx_isa)b;
}

const char *hx_isa_name(hx_isa isa) {
    switch (isa) {
    case HX_ISA_SCALAR: return "scalar";
    case HX_ISA_AVX2: return "avx2";
    case HX_ISA_AVX512: return "avx512";
    case HX_ISA_AVX512_VNNI: return "avx512vnni";
    }
    return "?";
}

static _Atomic int g_isa = -1;

hx_isa hx_isa_current(void) {
    int cur = atomic_load(&g_isa);
    if (cur >= 0) return (hx_isa)cur;
    hx_isa best = hx_isa_best(), want = best;
    const char *env = getenv("HX_ISA");
    if (env && *env) {
        if (!strcasecmp(env, "scalar")) want = HX_ISA_SCALAR;
        else if (!strcasecmp(env, "avx2")) want = HX_ISA_AVX2;
        else if (!strcasecmp(env, "avx512")) want = HX_ISA_AVX512;
        else if (!strcasecmp(env, "avx512vnni")) want = HX_ISA_AVX512_VNNI;
        else HX_WARN("HX_ISA=%s: unknown (scalar|avx2|avx512|avx512vnni), using %s", env, hx_isa_name(best));
        if (want > best) {
            HX_WARN("HX_ISA=%s: not usable on this CPU/OS, using %s", env, hx_isa_name(best));
            want = best;
        }
    }
    int expect = -1;
    atomic_compare_exchange_strong(&g_isa, &expect, (int)want);
    return (hx_isa)atomic_load(&g_isa);
}

bool hx_isa_set(hx_isa isa) {
    if ((int)isa < 0 || isa > hx_isa_best()) return false;
    atomic_store(&g_isa, (int)isa);
    return true;
}

/* ---- kernel tables: [type] per ISA; NULL = no specialized kernel at that ISA ---- */
#define ROW(t, sfx) [HX_TYPE_##t] = hx_dot_##sfx

static const hx_vec_dot_fn k_scalar[HX_TYPE_COUNT] = {
    ROW(F32, f32_scalar), ROW(F16, f16_scalar), ROW(BF16, bf16_scalar),
    ROW(Q4_0, q4_0_scalar), ROW(Q4_1, q4_1_scalar), ROW(Q5_0, q5_0_scalar),
    ROW(Q5_1, q5_1_scalar), ROW(Q8_0, q8_0_scalar), ROW(Q2_K, q2_K_scalar),
    ROW(Q3_K, q3_K_scalar), ROW(Q4_K, q4_K_scalar), ROW(Q5_K, q5_K_scalar),
    ROW(Q6_K, q6_K_scalar),
};
static const hx_vec_dot_fn k_avx2[HX_TYPE_COUNT] = {
    ROW(F32, f32_avx2), ROW(F16, f16_avx2), ROW(BF16, bf16_avx2),
    ROW(Q4_0, q4_0_avx2), ROW(Q4_1, q4_1_avx2), ROW(Q5_0, q5_0_avx2),
    ROW(Q5_1, q5_1_avx2), ROW(Q8_0, q8_0_avx2), ROW(Q2_K, q2_K_avx2),
    ROW(Q3_K, q3_K_avx2), ROW(Q4_K, q4_K_avx2), ROW(Q5_K, q5_K_avx2),
    ROW(Q6_K, q6_K_avx2),
};
/* AVX-512 without VNNI has no kernel of its own: its integer work is AVX2's
 * (maddubs has no wider-but-same-order form worth a second copy); VNNI's are
 * bit-identical to AVX2's (dot.h), so every level gives the same results. */
static const hx_vec_dot_fn k_avx512_vnni[HX_TYPE_COUNT] = {
    ROW(Q4_0, q4_0_avx512vnni), ROW(Q5_0, q5_0_avx512vnni), ROW(Q8_0, q8_0_avx512vnni),
};

hx_vec_dot_fn hx_get_vec_dot(int type, hx_isa isa) {
    if (type < 0 || type >= HX_TYPE_COUNT) return NULL;
    /* never hand out a kernel the CPU cannot run */
    hx_isa best = hx_isa_best();
    if (isa > best) isa = best;
    hx_vec_dot_fn fn = NULL;
    switch (isa) {
    case HX_ISA_AVX512_VNNI: if ((fn = k_avx512_vnni[type])) return fn; /* fall through */
    case HX_ISA_AVX512: /* fall through */
    case HX_ISA_AVX2: if ((fn = k_avx2[type])) return fn; /* fall through */
    case HX_ISA_SCALAR: return k_scalar[type];
    }
    return NULL;
}

hx_gemm_fn hx_get_gemm(int type, hx_isa isa) {
    if (isa > hx_isa_best()) isa = hx_isa_best();
    if (isa < HX_ISA_AVX2) return NULL;
    static _Atomic int tuned = 0; /* HX_GEMM_TILE=MRxNR[:MV] (all four types), read once: a benchmark knob */
    if (!atomic_exchange(&tuned, 1)) {
        const char *env = getenv("HX_GEMM_TILE");
        int mr = 0, nr = 0, mv = 0;
        if (env && sscanf(env, "%dx%d:%d", &mr, &nr, &mv) >= 2)
            for (int k = 0; k < 4; k++) hx_gemm_avx2_set_tile(k, mr, nr, mv);
    }
    const bool vnni = isa >= HX_ISA_AVX512_VNNI;
    switch (type) {
    case HX_TYPE_Q8_0: return vnni ? hx_gemm_q8_0_avx512vnni : hx_gemm_q8_0_avx2;
    case HX_TYPE_Q4_0: return vnni ? hx_gemm_q4_0_avx512vnni : hx_gemm_q4_0_avx2;
    case HX_TYPE_Q5_0: return vnni ? hx_gemm_q5_0_avx512vnni : hx_gemm_q5_0_avx2;
    case HX_TYPE_Q4_K: return hx_gemm_q4_K_avx2;
    case HX_TYPE_Q6_K: return hx_gemm_q6_K_avx2;
    default: return NULL;
    }
}

hx_gemm_fn hx_get_gemm_batch(int type, hx_isa isa) {
    static _Atomic int packed = -1; /* HX_GEMM_NO_PACKED=1: benchmark knob, read once */
    if (packed < 0) packed = getenv("HX_GEMM_NO_PACKED") == NULL;
    if (packed && hx_get_gemm(HX_TYPE_Q4_0, isa)) { /* the AVX2 kernels are available */
        const bool vnni = (isa > hx_isa_best() ? hx_isa_best() : isa) >= HX_ISA_AVX512_VNNI;
        if (type == HX_TYPE_Q8_0) return vnni ? hx_gemm_q8_0_packed_avx512vnni : hx_gemm_q8_0_packed_avx2;
        if (type == HX_TYPE_Q4_0) return vnni ? hx_gemm_q4_0_packed_avx512vnni : hx_gemm_q4_0_packed_avx2;
        if (type == HX_TYPE_Q5_0) return vnni ? hx_gemm_q5_0_packed_avx512vnni : hx_gemm_q5_0_packed_avx2;
        if (type == HX_TYPE_Q4_K) return vnni ? hx_gemm_q4_K_packed_avx512vnni : hx_gemm_q4_K_packed_avx2;
        if (type == HX_TYPE_Q6_K) return hx_gemm_q6_K_packed_avx2;
    }
    return hx_get_gemm(type, isa);
}

hx_gemm_fn hx_get_gemm_ggml(int type, hx_isa isa) {
    if (!hx_get_gemm(HX_TYPE_Q8_0, isa)) return NULL; /* no AVX2 kernels here */
    if (isa > hx_isa_best()) isa = hx_isa_best();
    const bool vnni = isa >= HX_ISA_AVX512_VNNI; /* same bits as the AVX2 tiles */
    if (type == HX_TYPE_Q8_0) return vnni ? hx_gemm_q8_0_ggml_avx512vnni : hx_gemm_q8_0_avx2;
    if (type == HX_TYPE_Q5_0) return vnni ? hx_gemm_q5_0_avx512vnni : hx_gemm_q5_0_avx2;
    if (type == HX_TYPE_Q6_K) return vnni ? hx_gemm_q6_K_ggml_avx512vnni : hx_gemm_q6_K_avx2;
    return NULL;
}

hx_gemm_fn hx_get_gemm_q4_K_ggml(hx_isa isa, bool gemv_order) {
    if (!hx_get_gemm(HX_TYPE_Q4_K, isa)) return NULL; /* no AVX2 kernels here */
    if (isa > hx_isa_best()) isa = hx_isa_best();
    if (isa >= HX_ISA_AVX512_VNNI) return gemv_order ? hx_gemm_q4_K_ggml_gemv_avx512vnni : hx_gemm_q4_K_ggml_gemm_avx512vnni;
    return gemv_order ? hx_gemm_q4_K_ggml_gemv_avx2 : hx_gemm_q4_K_ggml_gemm_avx2;
}

hx_isa hx_gemm_batch_ref_isa(int type, hx_isa isa) {
    hx_gemm_fn g = hx_get_gemm_batch(type, isa);
    return g == hx_gemm_q8_0_packed_avx2 || g == hx_gemm_q4_0_packed_avx2 || g == hx_gemm_q5_0_packed_avx2 ||
                   g == hx_gemm_q4_K_packed_avx2 || g == hx_gemm_q6_K_packed_avx2 ||
                   g == hx_gemm_q4_0_packed_avx512vnni || g == hx_gemm_q5_0_packed_avx512vnni ||
                   g == hx_gemm_q8_0_packed_avx512vnni || g == hx_gemm_q4_K_packed_avx512vnni
               ? HX_ISA_SCALAR : HX_ISA_AVX2;
}

int hx_isa_matvec_same_as(int type, int level) {
    if (type < 0 || type >= HX_TYPE_COUNT || level < HX_ISA_SCALAR || level > HX_ISA_AVX512_VNNI) return -1;
    const hx_isa lv = (hx_isa)level;
    for (int k = HX_ISA_SCALAR; k < level; k++)
        if (hx_get_gemm(type, (hx_isa)k) == hx_get_gemm(type, lv) &&
            hx_get_vec_dot(type, (hx_isa)k) == hx_get_vec_dot(type, lv))
            return k;
    return level;
}

void hx_vec_dot(int type, int64_t n, float *out, const void *w, const void *x) {
    hx_vec_dot_fn fn = hx_get_vec_dot(type, hx_isa_current());
    if (fn) fn(n, out, w, x);
    else *out = 0.f;
}
