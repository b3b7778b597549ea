/* types.c — the table of GGUF tensor types: block sizes, bytes per block,
 * and the activation type each one's dot kernel takes. */
#include "quant/quant.h"

#include <strings.h>

#define QK 32   /* legacy block size */
#define QKK 256 /* K-quant super-block size */

/* Bytes per block from the GGUF block structs:
 *  Q4_0 {f16 d; u8 qs[16]}=18  Q4_1 {f16 d,m; u8 qs[16]}=20  Q5_0 {f16 d; u8 qh[4]; u8 qs[16]}=22
 *  Q5_1 {f16 d,m; u8 qh[4]; qs[16]}=24  Q8_0 {f16 d; i8 qs[32]}=34  Q8_1 {f16 d,s; i8 qs[32]}=36
 *  Q2_K {u8 scales[16]; u8 qs[64]; f16 d,dmin}=84  Q3_K {u8 hmask[32]; qs[64]; scales[12]; f16 d}=110
 *  Q4_K {f16 d,dmin; u8 scales[12]; qs[128]}=144  Q5_K {f16 d,dmin; scales[12]; qh[32]; qs[128]}=176
 *  Q6_K {u8 ql[128]; qh[64]; i8 scales[16]; f16 d}=210  Q8_K {f32 d; i8 qs[256]; i16 bsums[16]}=292 */
static const hx_type_info k_types[HX_TYPE_COUNT] = {
    [HX_TYPE_F32]  = {"F32",  1,   4,   true, HX_TYPE_F32},
    [HX_TYPE_F16]  = {"F16",  1,   2,   true, HX_TYPE_F32},
    [HX_TYPE_BF16] = {"BF16", 1,   2,   true, HX_TYPE_F32},
    [HX_TYPE_Q4_0] = {"Q4_0", QK,  18,  true, HX_TYPE_Q8_0},
    [HX_TYPE_Q4_1] = {"Q4_1", QK,  20,  true, HX_TYPE_Q8_1},
    [HX_TYPE_Q5_0] = {"Q5_0", QK,  22,  true, HX_TYPE_Q8_0},
    [HX_TYPE_Q5_1] = {"Q5_1", QK,  24,  true, HX_TYPE_Q8_1},
    [HX_TYPE_Q8_0] = {"Q8_0", QK,  34,  true, HX_TYPE_Q8_0},
    [HX_TYPE_Q8_1] = {"Q8_1", QK,  36,  true, HX_TYPE_Q8_1},
    [HX_TYPE_Q2_K] = {"Q2_K", QKK, 84,  true, HX_TYPE_Q8_K},
    [HX_TYPE_Q3_K] = {"Q3_K", QKK, 110, true, HX_TYPE_Q8_K},
    [HX_TYPE_Q4_K] = {"Q4_K", QKK, 144, true, HX_TYPE_Q8_K},
    [HX_TYPE_Q5_K] = {"Q5_K", QKK, 176, true, HX_TYPE_Q8_K},
    [HX_TYPE_Q6_K] = {"Q6_K", QKK, 210, true, HX_TYPE_Q8_K},
    [HX_TYPE_Q8_K] = {"Q8_K", QKK, 292, true, HX_TYPE_Q8_K},
    /* known on disk, not used for weights: sizes only */
    [HX_TYPE_I8]   = {"I8",   1,   1,   false, -1},
    [HX_TYPE_I16]  = {"I16",  1,   2,   false, -1},
    [HX_TYPE_I32]  = {"I32",  1,   4,   false, -1},
    [HX_TYPE_I64]  = {"I64",  1,   8,   false, -1},
    [HX_TYPE_F64]  = {"F64",  1,   8,   false, -1},
};

const hx_type_info *hx_type_get(int type) {
    if (type < 0 || type >= HX_TYPE_COUNT || !k_types[type].name) return NULL;
    return &k_types[type];
}

const char *hx_type_name(int type) {
    const hx_type_info *t = hx_type_get(type);
    return t ? t->name : "?";
}

int hx_type_from_name(const char *name) {
    for (int i = 0; i < HX_TYPE_COUNT; i++)
        if (k_types[i].name && !strcasecmp(k_types[i].name, name)) return i;
    return -1;
}

size_t hx_row_size(int type, int64_t n) {
    const hx_type_info *t = hx_type_get(type);
    if (!t || n < 0 || n % t->block_size) return 0;
    return (size_t)(n / t->block_size) * (size_t)t->type_size;
}
