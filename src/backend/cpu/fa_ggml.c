/* fa_ggml.c — scalar pieces of ggml's tiled flash attention (see fa_ggml.h). */
#include "backend/cpu/fa_ggml.h"

#include <math.h>

#include "backend/cpu/glu.h"

void hx_fa_scores64(int hd, const float *kt, const float *q, float scale, float *s, bool avx2) {
    if (avx2) { hx_fa_scores64_avx2(hd, kt, q, scale, s); return; }
    for (int k = 0; k < 64; k++) {
        float a = 0.0f;
        for (int d = 0; d < hd; d++) a = fmaf(kt[d * 64 + k], q[d], a);
        s[k] = a * scale;
    }
}

double hx_fa_exp64(float *kq, float M, bool avx2) {
    if (avx2) return hx_fa_exp64_avx2(kq, M);
    double sum = 0.0;
    for (int b = 0; b < 64; b += 8) {
        float *v = kq + b;
        for (int l = 0; l < 8; l++) v[l] = hx_expf_ggml(v[l] - M);
        sum += (double)(((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7])));
    }
    return sum;
}

void hx_fa_vacc64(int hd, const float *v, const float *p, float *vacc, bool avx2) {
    if (avx2 && hd % 8 == 0) { hx_fa_vacc64_avx2(hd, v, p, vacc); return; }
    for (int k = 0; k < 64; k++) {
        if (p[k] == 0.0f) continue;
        for (int d = 0; d < hd; d++) vacc[d] = fmaf(v[(long)k * hd + d], p[k], vacc[d]);
    }
}
