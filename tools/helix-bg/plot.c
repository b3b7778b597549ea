/* plot.c — see plot.h. */
#include "plot.h"

#include "png.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a 5x7 pixel font: 7 rows of 5 columns, '#' set ---- */

typedef struct glyph { char c; const char *row[7]; int drop; } glyph;   /* drop: rows below the baseline (g p q y) */

static const glyph font[] = {
    {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}, 0},
    {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}, 0},
    {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}, 0},
    {'3', {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."}, 0},
    {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}, 0},
    {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}, 0},
    {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}, 0},
    {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}, 0},
    {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}, 0},
    {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}, 0},
    {'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}, 0},
    {',', {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."}, 0},
    {'-', {".....", ".....", ".....", ".###.", ".....", ".....", "....."}, 0},
    {'+', {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}, 0},
    {':', {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}, 0},
    {'(', {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}, 0},
    {')', {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}, 0},
    {'/', {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."}, 0},
    {'=', {".....", ".....", "#####", ".....", "#####", ".....", "....."}, 0},
    {'%', {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"}, 0},
    {'_', {".....", ".....", ".....", ".....", ".....", ".....", "#####"}, 0},
    {'a', {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"}, 0},
    {'b', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "####."}, 0},
    {'c', {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."}, 0},
    {'d', {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"}, 0},
    {'e', {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."}, 0},
    {'f', {"..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..."}, 0},
    {'g', {".####", "#...#", "#...#", "#...#", ".####", "....#", ".###."}, 2},
    {'h', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"}, 0},
    {'i', {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."}, 0},
    {'j', {"...#.", ".....", "..##.", "...#.", "...#.", "#..#.", ".##.."}, 0},
    {'k', {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."}, 0},
    {'l', {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}, 0},
    {'m', {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#"}, 0},
    {'n', {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"}, 0},
    {'o', {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."}, 0},
    {'p', {"####.", "#...#", "#...#", "#...#", "####.", "#....", "#...."}, 2},
    {'q', {".####", "#...#", "#...#", "#...#", ".####", "....#", "....#"}, 2},
    {'r', {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."}, 0},
    {'s', {".....", ".....", ".###.", "#....", ".###.", "....#", "####."}, 0},
    {'t', {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."}, 0},
    {'u', {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"}, 0},
    {'v', {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."}, 0},
    {'w', {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."}, 0},
    {'x', {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"}, 0},
    {'y', {"#...#", "#...#", "#...#", "#...#", ".####", "....#", ".###."}, 2},
    {'z', {".....", ".....", "#####", "...#.", "..#..", ".#...", "#####"}, 0},
};

/* ---- a canvas: (h, w, 3) bytes ---- */

typedef struct canvas { unsigned char *px; int w, h; } canvas;

static void dot(canvas *c, int x, int y, const uint8_t rgb[3]) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    memcpy(c->px + ((size_t)y * c->w + x) * 3, rgb, 3);
}

static void rect(canvas *c, int x0, int y0, int x1, int y1, const uint8_t rgb[3]) {   /* inclusive */
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++) dot(c, x, y, rgb);
}

/* A line 2 pixels thick (Bresenham with a 2 x 2 brush). */
static void line(canvas *c, int x0, int y0, int x1, int y1, const uint8_t rgb[3]) {
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, err = dx + dy;
    for (;;) {
        rect(c, x0, y0, x0 + 1, y0 + 1, rgb);
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * err;
        if (e2 >= dy) { err += dy; x0 += sx; }
        if (e2 <= dx) { err += dx; y0 += sy; }
    }
}

enum { FONT_SCALE = 2, ADV = 6 * FONT_SCALE, TEXT_H = 7 * FONT_SCALE };

static int text_w(const char *s) { size_t n = strlen(s); return n ? (int)n * ADV - FONT_SCALE : 0; }

/* s with its top-left corner at (x, y). */
static void text(canvas *c, int x, int y, const char *s, const uint8_t rgb[3]) {
    for (; *s; s++, x += ADV) {
        char ch = (char)tolower((unsigned char)*s);
        for (size_t g = 0; g < sizeof font / sizeof font[0]; g++) {
            if (font[g].c != ch) continue;
            for (int r = 0; r < 7; r++)
                for (int k = 0; k < 5; k++)
                    if (font[g].row[r][k] == '#') {
                        int yy = y + (r + font[g].drop) * FONT_SCALE;
                        rect(c, x + k * FONT_SCALE, yy, x + k * FONT_SCALE + FONT_SCALE - 1, yy + FONT_SCALE - 1, rgb);
                    }
            break;
        }
    }
}

/* ---- axes ---- */

/* Ticks for [lo, hi]: a step of 1, 2 or 5 x 10^k giving about `want` of them,
 * the range widened to whole steps. */
typedef struct axis { double lo, hi, step; int decimals; } axis;

static axis nice_axis(double lo, double hi, int want, double min_step) {
    if (!(hi > lo)) { double d = fabs(lo) > 1e-12 ? fabs(lo) * 0.1 : 0.5; lo -= d; hi += d; }
    double raw = (hi - lo) / want, mag = pow(10, floor(log10(raw))), f = raw / mag;
    double step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
    if (step < min_step) step = min_step;
    axis a = {floor(lo / step + 1e-9) * step, ceil(hi / step - 1e-9) * step, step, 0};
    if (a.hi <= a.lo) a.hi = a.lo + step;
    a.decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (a.decimals > 8) a.decimals = 8;
    return a;
}

hx_status plot_png(const char *path, const char *title, const char *xlabel, const char *ylabel, const plot_series *s,
                   int ns, hx_error *e) {
    enum { W = 960, H = 540, L = 100, R = W - 30, T = 60, B = H - 70 };   /* image; plot area [L, R] x [T, B] */
    static const uint8_t white[3] = {255, 255, 255}, ink[3] = {40, 40, 40}, grid[3] = {228, 228, 228},
                         frame[3] = {120, 120, 120};
    /* the data's extent (finite points only) */
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i])) continue;
            x0 = fmin(x0, s[k].x[i]); x1 = fmax(x1, s[k].x[i]);
            y0 = fmin(y0, s[k].y[i]); y1 = fmax(y1, s[k].y[i]);
        }
    if (!(x0 <= x1)) { x0 = 0; x1 = 1; y0 = 0; y1 = 1; }   /* nothing to draw yet: empty axes */
    /* y: linear (from 0 unless the data sit far above it), or log10 when the
     * values span 30x or more (a loss falling from hundreds to one) */
    bool logy = y0 > 0 && y1 >= 30 * y0;
    axis ax = nice_axis(x0, x1, 8, 1), ay = nice_axis(y0 < 0 || y0 > 0.25 * y1 ? y0 : 0, y1, 6, 0);
    if (logy) ay = (axis){floor(log10(y0) + 1e-9), ceil(log10(y1) - 1e-9), 1, 0};
    canvas c = {malloc((size_t)W * H * 3), W, H};
    if (!c.px) {
        snprintf(e->msg, sizeof e->msg, "%s: out of memory for the plot", path);
        e->status = HX_ERR_NOMEM;
        return HX_ERR_NOMEM;
    }
    memset(c.px, 255, (size_t)W * H * 3);
#define PX(x) (L + (int)lround(((x) - ax.lo) / (ax.hi - ax.lo) * (R - L)))
#define PY(y) (B - (int)lround(((logy ? log10(y) : (y)) - ay.lo) / (ay.hi - ay.lo) * (B - T)))
    char lab[64];
    /* grid lines, ticks and their labels; on a log axis 1, 2 and 5 of each
     * decade (1 alone past 3 decades), labelled with %g */
    if (logy) {
        int dec = (int)(ay.hi - ay.lo);
        for (int d = (int)ay.lo; d <= (int)ay.hi; d++)
            for (int m = 1; m <= 5; m += m == 1 ? 1 : 3) {
                double v = m * pow(10, d);
                if ((m > 1 && dec > 3) || log10(v) > ay.hi + 1e-9) continue;
                int y = PY(v);
                rect(&c, L, y, R, y, grid);
                rect(&c, L - 6, y, L - 1, y, ink);
                snprintf(lab, sizeof lab, "%g", v);
                text(&c, L - 10 - text_w(lab), y - TEXT_H / 2, lab, ink);
            }
    }
    for (int i = 0; !logy && ay.lo + i * ay.step <= ay.hi + 1e-9 * ay.step; i++) {
        double v = ay.lo + i * ay.step;
        int y = PY(v);
        rect(&c, L, y, R, y, grid);
        rect(&c, L - 6, y, L - 1, y, ink);
        snprintf(lab, sizeof lab, "%.*f", ay.decimals, fabs(v) < 1e-12 * ay.step ? 0.0 : v);
        text(&c, L - 10 - text_w(lab), y - TEXT_H / 2, lab, ink);
    }
    for (int i = 0; ax.lo + i * ax.step <= ax.hi + 1e-9 * ax.step; i++) {
        double v = ax.lo + i * ax.step;
        int x = PX(v);
        rect(&c, x, T, x, B, grid);
        rect(&c, x, B + 1, x, B + 6, ink);
        snprintf(lab, sizeof lab, "%.*f", ax.decimals, v);
        text(&c, x - text_w(lab) / 2, B + 12, lab, ink);
    }
    /* the frame */
    rect(&c, L, T, R, T, frame); rect(&c, L, B, R, B, frame);
    rect(&c, L, T, L, B, frame); rect(&c, R, T, R, B, frame);
    /* the series: lines between consecutive finite points, then markers */
    for (int k = 0; k < ns; k++) {
        int px = 0, py = 0;
        bool have = false;
        for (int i = 0; i < s[k].n; i++) {
            if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i])) { have = false; continue; }
            int x = PX(s[k].x[i]), y = PY(s[k].y[i]);
            if (have) line(&c, px, py, x, y, s[k].rgb);
            else if (!s[k].markers) rect(&c, x - 2, y - 2, x + 2, y + 2, s[k].rgb);   /* a point alone stays visible */
            if (s[k].markers) { rect(&c, x - 4, y - 4, x + 4, y + 4, s[k].rgb); rect(&c, x - 2, y - 2, x + 2, y + 2, white); }
            px = x; py = y; have = true;
        }
    }
#undef PX
#undef PY
    /* text: title, axis names, legend (top right, inside the frame, on white) */
    text(&c, (W - text_w(title)) / 2, 16, title, ink);
    text(&c, (L + R - text_w(xlabel)) / 2, B + 40, xlabel, ink);
    char yl[160];
    snprintf(yl, sizeof yl, "%s%s", ylabel, logy ? " (log scale)" : "");
    text(&c, 8, T - 12 - TEXT_H, yl, ink);
    int lw = 0;
    for (int k = 0; k < ns; k++) if (text_w(s[k].label) > lw) lw = text_w(s[k].label);
    int bx1 = R - 10, bx0 = bx1 - (lw + 52), by0 = T + 10, by1 = by0 + 12 + ns * (TEXT_H + 10);
    rect(&c, bx0, by0, bx1, by1, white);
    rect(&c, bx0, by0, bx1, by0, frame); rect(&c, bx0, by1, bx1, by1, frame);
    rect(&c, bx0, by0, bx0, by1, frame); rect(&c, bx1, by0, bx1, by1, frame);
    for (int k = 0; k < ns; k++) {
        int y = by0 + 8 + k * (TEXT_H + 10), ym = y + TEXT_H / 2;
        line(&c, bx0 + 8, ym, bx0 + 34, ym, s[k].rgb);
        if (s[k].markers) { rect(&c, bx0 + 17, ym - 4, bx0 + 25, ym + 4, s[k].rgb); rect(&c, bx0 + 19, ym - 2, bx0 + 23, ym + 2, white); }
        text(&c, bx0 + 42, y, s[k].label, ink);
    }
    hx_status st = png_write(path, c.px, W, H, e);
    free(c.px);
    return st;
}
