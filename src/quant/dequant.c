/* dequant.c — block formats to f32, bit-exact with ggml / gguf-py.
 *
 * The order of float operations matters for bit-exactness: every formula
 * below multiplies in the same order as the reference (e.g. (d*sc)*q - dmin*m).
 */
#include "quant/quant_formats.h"

static void deq_q4_0(const block_q4_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        const float d = hx_h2f(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[i].qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const block_q4_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        const float d = hx_h2f(x[i].d), m = hx_h2f(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x[i].qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

static void deq_q5_0(const block_q5_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        const float d = hx_h2f(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < 16; j++) {
            int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            y[j] = (float)(((x[i].qs[j] & 0xF) | (h0 << 4)) - 16) * d;
            y[j + 16] = (float)(((x[i].qs[j] >> 4) | (h1 << 4)) - 16) * d;
        }
    }
}

static void deq_q5_1(const block_q5_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        const float d = hx_h2f(x[i].d), m = hx_h2f(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < 16; j++) {
            int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            y[j] = (float)((x[i].qs[j] & 0xF) | (h0 << 4)) * d + m;
            y[j + 16] = (float)((x[i].qs[j] >> 4) | (h1 << 4)) * d + m;
        }
    }
}

static void deq_q8_0(const block_q8_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK8_0) {
        const float d = hx_h2f(x[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

static void deq_q8_1(const block_q8_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK8_0) {
        const float d = hx_h2f(x[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

/* Q2_K: element 128*h + 32*s + l (l < 32) is bits 2s..2s+1 of qs[32h + l],
 * sub-block (128*h + 32*s + l)/16. */
static void deq_q2_K(const block_q2_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = hx_h2f(x[i].d), dmin = hx_h2f(x[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, s = (e % 128) / 32, l = e % 32;
            uint8_t sc = x[i].scales[e / 16];
            float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            int q = (x[i].qs[32 * h + l] >> (2 * s)) & 3;
            *y++ = dl * (float)q - ml;
        }
    }
}

/* Q3_K: low two bits as Q2_K; the third bit of element e is bit e/32 of hmask[e%32]. */
static void deq_q3_K(const block_q3_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = hx_h2f(x[i].d);
        int8_t sc[16];
        hx_q3k_scales(x[i].scales, sc);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, s = (e % 128) / 32, l = e % 32;
            int q = (x[i].qs[32 * h + l] >> (2 * s)) & 3;
            int hb = (x[i].hmask[l] >> (e / 32)) & 1;
            float dl = d * (float)sc[e / 16];
            *y++ = dl * (float)(q - (hb ? 0 : 4));
        }
    }
}

/* Q4_K: chunk c of 64 elements: qs[32c + l] low nibble -> 64c + l (sub-block 2c),
 * high nibble -> 64c + 32 + l (sub-block 2c+1). */
static void deq_q4_K(const block_q4_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = hx_h2f(x[i].d), dmin = hx_h2f(x[i].dmin);
        for (int c = 0; c < 4; c++) {
            uint8_t sc, m;
            const uint8_t *q = x[i].qs + 32 * c;
            hx_k4_scale_min(2 * c, x[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            hx_k4_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: as Q4_K; the fifth bit of chunk c's elements is bit 2c (low half) or
 * 2c+1 (high half) of qh[l]. */
static void deq_q5_K(const block_q5_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = hx_h2f(x[i].d), dmin = hx_h2f(x[i].dmin);
        for (int c = 0; c < 4; c++) {
            uint8_t sc, m;
            const uint8_t *q = x[i].qs + 32 * c, *qh = x[i].qh;
            hx_k4_scale_min(2 * c, x[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            hx_k4_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((q[l] & 0xF) + (((qh[l] >> (2 * c)) & 1) << 4)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((q[l] >> 4) + (((qh[l] >> (2 * c + 1)) & 1) << 4)) - m2;
        }
    }
}

/* Q6_K: half h (128 elements): element 128h + 32s + l takes ql[64h + l + 32*(s&1)]
 * nibble (s>>1) and bits 2s..2s+1 of qh[32h + l]. */
static void deq_q6_K(const block_q6_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = hx_h2f(x[i].d);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, s = (e % 128) / 32, l = e % 32;
            uint8_t lo = x[i].ql[64 * h + l + 32 * (s & 1)];
            int q = ((s >> 1) ? (lo >> 4) : (lo & 0xF)) | (((x[i].qh[32 * h + l] >> (2 * s)) & 3) << 4);
            *y++ = d * (float)x[i].scales[e / 16] * (float)(q - 32);
        }
    }
}

static void deq_q8_K(const block_q8_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < QK_K; j++) *y++ = x[i].d * (float)x[i].qs[j];
}

void hx_dequantize_row(int type, const void *src, float *dst, int64_t n) {
    const hx_type_info *t = hx_type_get(type);
    if (!t || !t->supported || n <= 0 || n % t->block_size) return;
    const int64_t nb = n / t->block_size;
    switch (type) {
    case HX_TYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case HX_TYPE_F16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = hx_fp16_to_fp32(h[i]);
        break;
    }
    case HX_TYPE_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = hx_bf16_to_fp32(h[i]);
        break;
    }
    case HX_TYPE_Q4_0: deq_q4_0(src, dst, nb); break;
    case HX_TYPE_Q4_1: deq_q4_1(src, dst, nb); break;
    case HX_TYPE_Q5_0: deq_q5_0(src, dst, nb); break;
    case HX_TYPE_Q5_1: deq_q5_1(src, dst, nb); break;
    case HX_TYPE_Q8_0: deq_q8_0(src, dst, nb); break;
    case HX_TYPE_Q8_1: deq_q8_1(src, dst, nb); break;
    case HX_TYPE_Q2_K: deq_q2_K(src, dst, nb); break;
    case HX_TYPE_Q3_K: deq_q3_K(src, dst, nb); break;
    case HX_TYPE_Q4_K: deq_q4_K(src, dst, nb); break;
    case HX_TYPE_Q5_K: deq_q5_K(src, dst, nb); break;
    case HX_TYPE_Q6_K: deq_q6_K(src, dst, nb); break;
    case HX_TYPE_Q8_K: deq_q8_K(src, dst, nb); break;
    default: break;
    }
}
