/* cuda.h — plain C interface to the CUDA backend (issue 4).
 * Only present in the build when nvcc is found and HX_CUDA=ON (then HX_HAVE_CUDA=1).
 * Every function returns hx_status and fills hx_error; nothing aborts the host. */
#ifndef HX_BACKEND_CUDA_H
#define HX_BACKEND_CUDA_H
#include "helix.h"
#ifdef __cplusplus
extern "C" {
#endif

/* One usable device, as chosen by hx_cuda_init. */
typedef struct hx_cuda_device {
    int index;                 /* CUDA device ordinal */
    char name[256];            /* e.g. "NVIDIA H100 80GB HBM3" */
    int cc_major, cc_minor;    /* compute capability */
    size_t total_mem;          /* bytes */
    int n_sm;                  /* streaming multiprocessors */
} hx_cuda_device;

/* Number of CUDA devices; 0 with HX_ERR_DEVICE and a clear message when there is
 * no device or no driver (never a crash). */
hx_status hx_cuda_device_count(int *n, hx_error *e);

/* Picks device `index` (-1: device 0), makes it current and fills *dev. */
hx_status hx_cuda_init(int index, hx_cuda_device *dev, hx_error *e);

#ifdef __cplusplus
}
#endif
#endif
