// device.cu — CUDA device management: count, pick, describe; every call checked.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
#include "backend/cuda/cuda.h"

// Fills e with "file:line: what: cudaGetErrorString" and returns HX_ERR_DEVICE.
static hx_status cuda_fail(hx_error *e, cudaError_t rc, const char *file, int line, const char *what) {
    if (e) {
        e->status = HX_ERR_DEVICE;
        snprintf(e->msg, sizeof e->msg, "%s:%d: %s: %s", file, line, what, cudaGetErrorString(rc));
    }
    return HX_ERR_DEVICE;
}
// Checks one CUDA runtime call; returns hx_status from the enclosing function on failure.
#define HX_CUDA_CHECK(call, e) do { cudaError_t rc_ = (call); \
    if (rc_ != cudaSuccess) return cuda_fail((e), rc_, __FILE__, __LINE__, #call); } while (0)

extern "C" hx_status hx_cuda_device_count(int *n, hx_error *e) {
    *n = 0;
    int c = 0;
    cudaError_t rc = cudaGetDeviceCount(&c);
    if (rc != cudaSuccess) return cuda_fail(e, rc, __FILE__, __LINE__, "no usable CUDA device (cudaGetDeviceCount)");
    if (c <= 0) {
        if (e) { e->status = HX_ERR_DEVICE; snprintf(e->msg, sizeof e->msg, "no CUDA device found"); }
        return HX_ERR_DEVICE;
    }
    *n = c;
    return HX_OK;
}

extern "C" hx_status hx_cuda_init(int index, hx_cuda_device *dev, hx_error *e) {
    int n = 0;
    hx_status s = hx_cuda_device_count(&n, e);
    if (s != HX_OK) return s;
    if (index < 0) index = 0;
    if (index >= n) {
        if (e) { e->status = HX_ERR_ARG; snprintf(e->msg, sizeof e->msg, "CUDA device %d requested, %d present", index, n); }
        return HX_ERR_ARG;
    }
    HX_CUDA_CHECK(cudaSetDevice(index), e);
    cudaDeviceProp p;
    HX_CUDA_CHECK(cudaGetDeviceProperties(&p, index), e);
    memset(dev, 0, sizeof *dev);
    dev->index = index;
    snprintf(dev->name, sizeof dev->name, "%s", p.name);
    dev->cc_major = p.major; dev->cc_minor = p.minor;
    dev->total_mem = p.totalGlobalMem; dev->n_sm = p.multiProcessorCount;
    return HX_OK;
}
