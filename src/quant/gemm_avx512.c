/* gemm_avx512.c — the legacy-quant tiles of gemm_tiles.h (Q8_0, Q5_0, Q4_0
 * weights x Q8_0 activations) with AVX512-VNNI: vpdpbusd on 256-bit vectors
 * sums four u8 x s8 products straight into an int32 lane, one instruction
 * where AVX2 needs maddubs + madd (and Q4_0's -8 offset becomes the
 * accumulator's start value: one vpdpbusd per row, token and block instead of
 * maddubs, sub, madd).
 *
 * The int32 lanes are the AVX2 kernels' lanes exactly (gemm_tiles.h says why)
 * and every float step is the same, so these kernels give the AVX2 kernels'
 * bits: matvec, batch tiles and the per-row dots (1x1 tiles) alike. The
 * AVX-512 level therefore never changes a result, only the instruction count;
 * the parity mode (HX_MM_GGML_ORDER) may use them as well. 256-bit vectors
 * rather than 512: a zmm would hold two blocks whose float steps then run in
 * another order, and on Zen 4 512-bit ops are split in two 256-bit halves
 * anyway, so they would gain nothing there.
 *
 * Compiled with the AVX-512 flags; called only after cpu.c has checked
 * AVX512F/BW/VL/VNNI in CPUID and the ZMM state in XCR0. With HX_SIMDE_EMU
 * (tests/CMakeLists.txt, where SIMDe's headers exist) the same source is
 * compiled for plain AVX2 with vpdpbusd emulated by SIMDe and every exported
 * name suffixed _emu, so machines without AVX-512 test these kernels too. */
#ifdef HX_SIMDE_EMU
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define HX_EMU(name) name##_emu
#else
#define HX_EMU(name) name
#endif

#include "quant/dot.h"
#include "quant/simd_avx2.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

#define DOT_U8S8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
/* -sum 8*x per int32 lane: the accumulator Q4_DOT starts from */
#define Q4_OFFSET(xv) _mm256_sub_epi32(_mm256_setzero_si256(), DOT_U8S8(_mm256_set1_epi8(8), xv))
#define Q4_DOT(wq, xv, off) _mm256_dpbusd_epi32(off, wq, xv)
#include "quant/gemm_tiles.h"

TILES(q8_0)
TILES(q5_0)
TILES(q4_0)

/* tile shapes: the AVX2 build's (gemm_avx2.c), batches MR x NR, matvec MV rows */
typedef struct { const tile_fn (*t)[4]; int bs, mr, nr, mv; } gemm_kind;
static const gemm_kind k_q8_0 = { tiles_q8_0, QK8_0, 4, 4, 4 }, k_q5_0 = { tiles_q5_0, QK4_0, 4, 4, 4 },
                       k_q4_0 = { tiles_q4_0, QK4_0, 4, 4, 4 };

static void drive(const gemm_kind *k, int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                  size_t ldx, float *y, size_t ldy) {
    const int64_t nb = n / k->bs;
    const int mr = nc == 1 ? k->mv : k->mr, nr_ = nc == 1 ? 1 : k->nr;
    for (int64_t r0 = 0; r0 < nr; r0 += mr) {
        const int rm = (int)(nr - r0 < mr ? nr - r0 : mr);
        for (int64_t c0 = 0; c0 < nc; c0 += nr_) {
            const int cn = (int)(nc - c0 < nr_ ? nc - c0 : nr_);
            k->t[rm - 1][cn - 1](nb, (const uint8_t *)w + r0 * ldw, ldw, (const uint8_t *)x + c0 * ldx, ldx,
                                 y + c0 * ldy + r0, ldy);
        }
    }
}

#define GEMM(T)                                                                                                   \
    void HX_EMU(hx_gemm_##T##_avx512vnni)(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw,           \
                                         const void *x, size_t ldx, float *y, size_t ldy) {                       \
        drive(&k_##T, n, nr, nc, w, ldw, x, ldx, y, ldy);                                                         \
    }                                                                                                             \
    void HX_EMU(hx_dot_##T##_avx512vnni)(int64_t n, float *out, const void *w, const void *x) {                   \
        T##_1x1(n / k_##T.bs, w, 0, x, 0, out, 0);                                                                \
    }
GEMM(q8_0)
GEMM(q5_0)
GEMM(q4_0)
