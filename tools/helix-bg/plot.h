/* plot.h — a line chart as a PNG (finetune's loss curve): series of (x, y)
 * points on linear axes with "nice" ticks (1, 2 or 5 x 10^k; y on a log10
 * axis when it spans 30x or more) and their
 * labels, grid lines, a title, axis names and a legend, drawn with a built-in
 * 5x7 pixel font (lowercase, digits, a little punctuation) and written with
 * png.c. */
#ifndef HX_CLI_PLOT_H
#define HX_CLI_PLOT_H

#include <stdbool.h>
#include <stdint.h>

#include "helix.h"

typedef struct plot_series {
    const double *x, *y;   /* n points, x ascending; a non-finite y is skipped and breaks the line */
    int n;
    uint8_t rgb[3];        /* line colour */
    bool markers;          /* a square on every point (a sparse series, such as held-out loss) */
    const char *label;     /* in the legend */
} plot_series;

/* Draws the series on one pair of axes (x ticks whole numbers: steps) into a
 * 960 x 540 image and writes it atomically to path. Text is drawn lowercase;
 * characters the font lacks are blank. */
hx_status plot_png(const char *path, const char *title, const char *xlabel, const char *ylabel, const plot_series *s,
                   int ns, hx_error *e);

#endif
