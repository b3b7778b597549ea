// check.cuh — host-side CUDA error reporting for the .cu files that return an
// hx_status: CK(call) returns HX_ERR_DEVICE with "cuda: file:line: call:
// error string" in *e when the call fails (e must be in scope).
#pragma once
#include <stdio.h>
#include <cuda_runtime.h>
extern "C" {
#include "core/core.h"
}

// Fills e with "file:line: what: error string" and returns HX_ERR_DEVICE.
static inline hx_status cfail(hx_error *e, cudaError_t rc, const char *file, int line, const char *what) {
    if (e) {
        e->status = HX_ERR_DEVICE;
        snprintf(e->msg, sizeof e->msg, "cuda: %s:%d: %s: %s", file, line, what, cudaGetErrorString(rc));
    }
    return HX_ERR_DEVICE;
}
#define CK(call) do { cudaError_t rc_ = (call); \
    if (rc_ != cudaSuccess) return cfail(e, rc_, __FILE__, __LINE__, #call); } while (0)
