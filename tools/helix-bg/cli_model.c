/* cli_model.c — opening a model the way generate, chat and bench all do:
 * --device / -ngl mapped to hx_model_params, a progress line on a terminal. */
#include "cli.h"
#include "helix_dev.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *const cli_device_names[] = {"auto", "cpu", "cuda", NULL};
const char *const cli_split_mode_names[] = {"row", "layer", NULL};

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Bytes of a file, or of the regular files directly in a folder (a Hugging
 * Face folder's shards); 0 when unknown. */
static unsigned long long path_bytes(const char *path) {
    struct stat st;
    if (stat(path, &st)) return 0;
    if (!S_ISDIR(st.st_mode)) return (unsigned long long)st.st_size;
    unsigned long long sum = 0;
    DIR *d = opendir(path);
    if (!d) return 0;
    char p[4096];
    for (struct dirent *de; (de = readdir(d));) {
        snprintf(p, sizeof p, "%s/%s", path, de->d_name);
        if (!stat(p, &st) && S_ISREG(st.st_mode)) sum += (unsigned long long)st.st_size;
    }
    closedir(d);
    return sum;
}

typedef struct progress {
    const char *cmd;
    int shown;        /* last percent printed, -1: none yet */
} progress;

/* The callback's state outlives hx_model_open: on CUDA, hx_context_new
 * reports the weight upload through the model's callback too. */
static progress g_progress = {"", -1};

void cli_progress_end(void) {
    if (g_progress.shown >= 0) fprintf(stderr, "\r\033[K"); /* the progress line goes away */
    g_progress.shown = -1;
}

static bool on_progress(float fraction, void *user) {
    progress *p = user;
    int pct = (int)(fraction * 100.0f + 0.5f);
    if (pct < 0) pct = 0;
    if (pct > 100) pct = 100;
    if (pct != p->shown) {
        fprintf(stderr, "\rhelix-bg %s: loading %3d%%", p->cmd, pct);
        fflush(stderr);
        p->shown = pct;
    }
    return true;
}

hx_model *cli_model_open(const char *cmd, const char *path, const cli_device *d, double *load_s) {
    hx_model_params mp = hx_model_default_params();
    mp.device = d->device == 1 ? HX_DEVICE_CPU : d->device == 2 ? HX_DEVICE_CUDA : HX_DEVICE_AUTO;
    if (d->ngl >= 0) { /* llama.cpp's -ngl: 0 is the CPU, more is the GPU (all layers: no partial offload) */
        mp.device = d->ngl > 0 ? HX_DEVICE_CUDA : HX_DEVICE_CPU;
        mp.n_gpu_layers = d->ngl;
    }
    if (d->tp > 1) { /* -tp N: the GPUs, whatever --device said; -sm layer: whole layers on each */
        if (d->split_mode == 1) mp.layer_split = d->tp;
        else mp.tensor_parallel = d->tp;
        if (d->ngl != 0) mp.device = HX_DEVICE_CUDA;
    }
    if (d->layer_split > 1) { /* --layer-split N: as --device says (cpu: a test of the split) */
        if (mp.layer_split > 1 || mp.tensor_parallel > 1) {
            fprintf(stderr, "helix-bg %s: --layer-split %d with -tp %d: give one of them\n", cmd, d->layer_split, d->tp);
            return NULL;
        }
        mp.layer_split = d->layer_split;
    }
    g_progress = (progress){cmd, -1};
    if (isatty(2) && path_bytes(path) > 100ull * 1000 * 1000) {
        mp.progress = on_progress;
        mp.progress_user = &g_progress;
    }
    hx_error e = {0};
    hx_model *m = NULL;
    double t0 = cli_now();
    hx_status s = hx_model_open(path, &mp, &m, &e);
    cli_progress_end();
    if (s != HX_OK) {
        fprintf(stderr, "helix-bg %s: %s\n", cmd, e.msg);
        return NULL;
    }
    if (load_s) *load_s = cli_now() - t0;
    const char *note = hx_model_device_note(m);
    if (note && *note) fprintf(stderr, "helix-bg %s: running on the CPU (%s)\n", cmd, note);
    return m;
}

hx_context *cli_context_new(const char *cmd, hx_model *m, const hx_context_params *cp, const char *dump_dir) {
    hx_error e = {0};
    /* HX_SPLIT_ONE_GPU=1 (a measurement knob, as the HX_CUDA_* ones): every part of a layer split on one GPU */
    const char *one = getenv("HX_SPLIT_ONE_GPU");
    hx_dev_context_params dp = {.dump_dir = dump_dir, .split_one_gpu = one && !strcmp(one, "1")};
    if (hx_model_device(m) == HX_DEVICE_CUDA && hx_dev_cuda_opts_from_env(&dp.cuda, &e)) {
        fprintf(stderr, "helix-bg %s: %s\n", cmd, e.msg);
        return NULL;
    }
    hx_context *ctx = NULL;
    hx_status st = dp.dump_dir || dp.cuda || dp.split_one_gpu ? hx_dev_context_new(m, cp, &dp, &ctx, &e) : hx_context_new(m, cp, &ctx, &e);
    cli_progress_end();
    if (st) {
        fprintf(stderr, "helix-bg %s: %s\n", cmd, e.msg);
        return NULL;
    }
    return ctx;
}
