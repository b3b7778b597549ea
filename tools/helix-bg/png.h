/* png.h — a small PNG writer for helix-bg (inspect's heatmaps, finetune's
 * loss curve): 8-bit RGB, filter 0 on every row, one zlib stream of
 * fixed-Huffman deflate whose matches are runs (the previous pixel) and
 * repeats (the row above), which is what heatmap cells, plot backgrounds and
 * grid lines are made of. CRC-32 and Adler-32 are computed here. */
#ifndef HX_CLI_PNG_H
#define HX_CLI_PNG_H

#include <stddef.h>
#include <stdint.h>

#include "helix.h"

/* rgb: (h, w, 3) bytes, rows top to bottom -> a whole PNG file in memory
 * (malloc'ed, *out_n bytes); NULL when out of memory. w, h >= 1. */
unsigned char *png_encode(const unsigned char *rgb, uint32_t w, uint32_t h, size_t *out_n);

/* png_encode, then written atomically to path (hx_write_file_atomic). */
hx_status png_write(const char *path, const unsigned char *rgb, uint32_t w, uint32_t h, hx_error *e);

#endif
