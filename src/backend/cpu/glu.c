/* glu.c — ggml-rounded SwiGLU / GeGLU (see glu.h). */
#include "backend/cpu/glu.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/core.h"

static inline float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* One lane of the vector exp: n = round(x / ln2) by the 1.5*2^23 trick, b = x - n ln2 in two
 * parts, exp(b) - 1 ~ j(b), scale by 2^n through the exponent bits (two factors when |n| > 126
 * so that large |x| over/underflow like the vector code). Every step is one IEEE op or an fma,
 * so this equals the FMA vector code bit for bit. */
float hx_expf_ggml(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const uint32_t e = to_bits(z) << 23;
    const float k = from_bits(e + to_bits(1.0f));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         0x1.ffffecp-1f * b);
    if (!(fabsf(n) > 126)) return fmaf(j, k, k);
    const uint32_t g = n <= 0 ? 0x82000000u : 0;
    const float s1 = from_bits(g + 0x7f000000u), s2 = from_bits(e - g);
    if (fabsf(n) > 192) return s1 * s1;
    return fmaf(s2, j, s2) * s1;
}

void hx_swiglu_ggml(int n, float *g, const float *u, bool avx2) {
    int i = 0;
    if (avx2) {
        i = n / 8 * 8;
        hx_swiglu_ggml_avx2(i, g, u);
    } else {
        for (; i < n / 8 * 8; i++) g[i] = g[i] / (1.0f + hx_expf_ggml(0.0f - g[i])) * u[i];
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static uint16_t gelu_tab[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;
static void gelu_init(void) {
    for (uint32_t i = 0; i < (1u << 16); i++) {
        const float x = hx_fp16_to_fp32((uint16_t)i);
        /* 1 + a*x*x as one FMA, as GCC contracts ggml_gelu_f32 in llama.cpp's build */
        const float inner = fmaf(0.044715f * x, x, 1.0f);
        const float y = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * inner));
        gelu_tab[i] = hx_fp32_to_fp16(y);
    }
}

void hx_geglu_ggml(int n, float *g, const float *u) {
    pthread_once(&gelu_once, gelu_init);
    for (int i = 0; i < n; i++) {
        const float x = g[i];
        if (x <= -10.0f) g[i] = 0.0f;
        else if (x >= 10.0f) g[i] = x * u[i];
        else g[i] = hx_fp16_to_fp32(gelu_tab[hx_fp32_to_fp16(x)]) * u[i];
    }
}
