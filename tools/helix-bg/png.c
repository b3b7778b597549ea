/* png.c — see png.h. */
#include "png.h"

#include "helix_kb.h"   /* hx_write_file_atomic */

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

/* CRC-32 (PNG's, reflected 0xEDB88320) over type and data of one chunk. */
static uint32_t crc32_of(const uint32_t *table, const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return ~c;
}

/* One chunk at out (length, type, data, CRC over type and data); returns its size. */
static size_t png_chunk(unsigned char *out, const uint32_t *crc_table, const char *type, const unsigned char *data,
                        uint32_t n) {
    put_be32(out, n);
    memcpy(out + 4, type, 4);
    if (n) memcpy(out + 8, data, n);
    put_be32(out + 8 + n, crc32_of(crc_table, out + 4, 4 + (size_t)n));
    return 12 + (size_t)n;
}

/* ---- deflate, fixed Huffman codes (RFC 1951 3.2.6) ---- */

typedef struct bits {
    unsigned char *p;
    size_t at;       /* bytes complete */
    uint64_t acc;    /* pending bits, LSB first */
    int n;
} bits;

static void put_bits(bits *b, uint32_t v, int n) {
    b->acc |= (uint64_t)v << b->n;
    b->n += n;
    while (b->n >= 8) { b->p[b->at++] = (unsigned char)b->acc; b->acc >>= 8; b->n -= 8; }
}

/* A Huffman code goes out most significant bit first. */
static void put_code(bits *b, uint32_t code, int len) {
    uint32_t r = 0;
    for (int i = 0; i < len; i++) r |= ((code >> i) & 1u) << (len - 1 - i);
    put_bits(b, r, len);
}

static void put_litlen(bits *b, int sym) {
    if (sym < 144) put_code(b, 0x30u + (uint32_t)sym, 8);
    else if (sym < 256) put_code(b, 0x190u + (uint32_t)(sym - 144), 9);
    else if (sym < 280) put_code(b, (uint32_t)(sym - 256), 7);
    else put_code(b, 0xC0u + (uint32_t)(sym - 280), 8);
}

static const uint16_t len_base[29] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83,
                                      99, 115, 131, 163, 195, 227, 258};
static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769,
                                       1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11,
                                       12, 12, 13, 13};

/* A match of len (3..258) bytes at distance dist (1..32768). */
static void put_match(bits *b, int len, int dist) {
    int i = 28;
    while (len_base[i] > len) i--;
    put_litlen(b, 257 + i);
    if (len_extra[i]) put_bits(b, (uint32_t)(len - len_base[i]), len_extra[i]);
    int d = 29;
    while (dist_base[d] > dist) d--;
    put_code(b, (uint32_t)d, 5);
    if (dist_extra[d]) put_bits(b, (uint32_t)(dist - dist_base[d]), dist_extra[d]);
}

/* How many bytes from i repeat those dist back (at most 258, within n). */
static int match_len(const unsigned char *p, size_t i, size_t n, size_t dist) {
    if (dist == 0 || dist > i) return 0;
    size_t m = n - i < 258 ? n - i : 258, k = 0;
    while (k < m && p[i + k] == p[i + k - dist]) k++;
    return (int)k;
}

/* raw[0..n) as one final fixed-Huffman block into out (room for n * 9 / 8 + 16
 * bytes: a literal is at most 9 bits, a match fewer than its bytes'). Matches
 * are tried at two distances only: `pixel` (a run of one colour) and `row`
 * (the row above), which is where images of flat areas repeat themselves. */
static size_t deflate_fixed(const unsigned char *raw, size_t n, size_t pixel, size_t row, unsigned char *out) {
    bits b = {out, 0, 0, 0};
    put_bits(&b, 1, 1);   /* BFINAL */
    put_bits(&b, 1, 2);   /* BTYPE 01: fixed Huffman */
    if (row > 32768) row = 0;   /* beyond deflate's window */
    for (size_t i = 0; i < n;) {
        int a = match_len(raw, i, n, pixel), c = match_len(raw, i, n, row);
        int len = a > c ? a : c;
        if (len >= 3) {
            put_match(&b, len, (int)(a >= c ? pixel : row));
            i += (size_t)len;
        } else {
            put_litlen(&b, raw[i++]);
        }
    }
    put_litlen(&b, 256);   /* end of block */
    if (b.n) put_bits(&b, 0, 8 - b.n);
    return b.at;
}

unsigned char *png_encode(const unsigned char *rgb, uint32_t w, uint32_t h, size_t *out_n) {
    size_t row = 1 + (size_t)w * 3, raw_n = row * h;
    size_t z_cap = 2 + raw_n + raw_n / 8 + 16 + 4;
    unsigned char *raw = malloc(raw_n), *z = malloc(z_cap), *png = malloc(8 + 25 + 12 + z_cap + 12);
    if (!raw || !z || !png) { free(raw); free(z); free(png); return NULL; }
    for (uint32_t y = 0; y < h; y++) {
        raw[y * row] = 0; /* filter: none */
        memcpy(raw + y * row + 1, rgb + (size_t)y * w * 3, (size_t)w * 3);
    }
    /* zlib: CMF/FLG (deflate, 32K window, no dictionary, check bits), the block, Adler-32 */
    size_t at = 0;
    z[at++] = 0x78; z[at++] = 0x01;
    at += deflate_fixed(raw, raw_n, 3, row, z + at);
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < raw_n; i++) { a = (a + raw[i]) % 65521; b = (b + a) % 65521; }
    put_be32(z + at, b << 16 | a);
    at += 4;
    uint32_t crc_table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char ihdr[13];
    put_be32(ihdr, w); put_be32(ihdr + 4, h);
    ihdr[8] = 8; ihdr[9] = 2; ihdr[10] = 0; ihdr[11] = 0; ihdr[12] = 0; /* 8-bit RGB, deflate, filter 0, no interlace */
    size_t n = 0;
    memcpy(png, sig, 8); n += 8;
    n += png_chunk(png + n, crc_table, "IHDR", ihdr, 13);
    n += png_chunk(png + n, crc_table, "IDAT", z, (uint32_t)at);
    n += png_chunk(png + n, crc_table, "IEND", NULL, 0);
    free(raw); free(z);
    *out_n = n;
    return png;
}

hx_status png_write(const char *path, const unsigned char *rgb, uint32_t w, uint32_t h, hx_error *e) {
    size_t n = 0;
    unsigned char *png = png_encode(rgb, w, h, &n);
    if (!png) {
        snprintf(e->msg, sizeof e->msg, "%s: out of memory for a %u x %u PNG", path, w, h);
        e->status = HX_ERR_NOMEM;
        return HX_ERR_NOMEM;
    }
    hx_status st = hx_write_file_atomic(path, png, n, e);
    free(png);
    return st;
}
