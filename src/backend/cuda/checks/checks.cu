// checks.cu — device measurements (copy bandwidth, cuBLAS GEMM rate) and the
// matrix-product and sampling kernels alone on host data, for gpu-test and
// bench (checks.h). Not part of libhelix.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <algorithm>

#include "backend/cuda/cuda.h"
#include "backend/cuda/checks/checks.h"
#include "backend/cuda/check.cuh"
#include "backend/cuda/kernels.cuh"
extern "C" {
#include "core/core.h"
#include "quant/quant.h"
}

extern "C" hx_status hx_cuda_sample_check(int V, const float *logits, const hx_cuda_sample_params *p,
                                         const int32_t *hist, int n_hist, float u, int32_t *next, bool *on_gpu,
                                         hx_error *e) {
    float *dl = NULL, *dw = NULL;
    int *dh = NULL, *dout = NULL;
    cudaError_t rc = cudaMalloc((void **)&dl, sizeof(float) * V);
    if (rc == cudaSuccess) rc = cudaMalloc((void **)&dw, sizeof(float) * V);
    if (rc == cudaSuccess) rc = cudaMalloc((void **)&dh, sizeof(int) * (n_hist > 0 ? n_hist : 1));
    if (rc == cudaSuccess) rc = cudaMalloc((void **)&dout, 2 * sizeof(int));
    if (rc == cudaSuccess) rc = cudaMemcpy(dl, logits, sizeof(float) * V, cudaMemcpyHostToDevice);
    if (rc == cudaSuccess && n_hist > 0) rc = cudaMemcpy(dh, hist, sizeof(int) * n_hist, cudaMemcpyHostToDevice);
    if (rc == cudaSuccess)
        rc = hx_k_sample(0, dl, dw, V, dh, n_hist, p->repeat_penalty, p->freq_penalty, p->presence_penalty, p->top_k,
                         p->top_p, p->min_p, p->temp, u, dout);
    int out[2] = {0, 1};
    if (rc == cudaSuccess) rc = cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
    cudaFree(dl); cudaFree(dw); cudaFree(dh); cudaFree(dout);
    if (rc != cudaSuccess) return cfail(e, rc, __FILE__, __LINE__, "sample check");
    *next = out[0];
    *on_gpu = out[1] == 0;
    return HX_OK;
}

// ---- measurements ----

static double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

extern "C" hx_status hx_cuda_copy_bandwidth(size_t bytes, int reps, double *gbps, hx_error *e) {
    void *a = NULL, *b = NULL;
    cudaEvent_t t0, t1;
    CK(cudaMalloc(&a, bytes));
    cudaError_t rc = cudaMalloc(&b, bytes);
    if (rc != cudaSuccess) { cudaFree(a); return cfail(e, rc, __FILE__, __LINE__, "cudaMalloc"); }
    cudaEventCreate(&t0); cudaEventCreate(&t1);
    cudaMemset(a, 1, bytes);
    std::vector<float> ms;
    for (int r = 0; r < reps + 3 && rc == cudaSuccess; r++) {
        cudaEventRecord(t0);
        rc = cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(t1);
        cudaEventSynchronize(t1);
        float t = 0;
        cudaEventElapsedTime(&t, t0, t1);
        if (r >= 3) ms.push_back(t);
    }
    cudaEventDestroy(t0); cudaEventDestroy(t1);
    cudaFree(a); cudaFree(b);
    if (rc != cudaSuccess) return cfail(e, rc, __FILE__, __LINE__, "cudaMemcpy");
    *gbps = 2.0 * bytes / (median(ms) * 1e-3) / 1e9;
    return HX_OK;
}

extern "C" hx_status hx_cuda_gemm_tflops(int m, int n, int k, int reps, double *tflops, hx_error *e) {
    __half *A = NULL, *B = NULL;
    float *C = NULL;
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return hx_err(e, HX_ERR_DEVICE, "cuda: cublasCreate failed");
    cudaError_t rc = cudaMalloc((void **)&A, sizeof(__half) * m * k);
    if (rc == cudaSuccess) rc = cudaMalloc((void **)&B, sizeof(__half) * k * n);
    if (rc == cudaSuccess) rc = cudaMalloc((void **)&C, sizeof(float) * m * n);
    std::vector<float> ms;
    if (rc == cudaSuccess) {
        cudaMemset(A, 0x3c, sizeof(__half) * m * k); // ~1.0 f16 values
        cudaMemset(B, 0x2c, sizeof(__half) * k * n);
        cudaEvent_t t0, t1;
        cudaEventCreate(&t0); cudaEventCreate(&t1);
        float alpha = 1, beta = 0;
        for (int r = 0; r < reps + 3; r++) {
            cudaEventRecord(t0);
            cublasStatus_t bs = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, A, CUDA_R_16F, k, B,
                                             CUDA_R_16F, k, &beta, C, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT);
            cudaEventRecord(t1);
            cudaEventSynchronize(t1);
            if (bs != CUBLAS_STATUS_SUCCESS) { rc = cudaErrorUnknown; break; }
            float t = 0;
            cudaEventElapsedTime(&t, t0, t1);
            if (r >= 3) ms.push_back(t);
        }
        cudaEventDestroy(t0); cudaEventDestroy(t1);
    }
    cudaFree(A); cudaFree(B); cudaFree(C);
    cublasDestroy(h);
    if (rc != cudaSuccess) return cfail(e, rc, __FILE__, __LINE__, "gemm");
    *tflops = 2.0 * m * n * k / (median(ms) * 1e-3) / 1e12;
    return HX_OK;
}

extern "C" hx_status hx_cuda_linear_check(int type, int rows, int cols, const void *w, int n, const float *x, float *y,
                                          bool q8, int reps, double *ms_out, const hx_cuda_dev_opts *dv,
                                          hx_error *e) {
    if (!hx_k_type_supported(type)) return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: type %s", hx_type_name(type));
    size_t rb = hx_row_size(type, cols);
    if (!rb) return hx_err(e, HX_ERR_ARG, "cuda: row length %d does not fit type %s", cols, hx_type_name(type));
    hx_dmat W = {NULL, type, cols, rows, rb};
    if (q8 && !hx_k_mvq_supported(&W))
        return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: no 8-bit-activation matvec for %s x %d (n %d)", hx_type_name(type), cols, n);
    // q8 with n > 1: the many-sequence kernels, mmq (the dp4a tile kernel when dv->mvq_cols_max >= n)
    const bool tile = q8 && n > 1 && dv && dv->mvq_cols_max >= n;
    CK(hx_k_pdl_init(!(dv && dv->no_pdl), NULL));
    uint8_t *dw = NULL;
    int8_t *xq = NULL;
    float *xd = NULL;
    float *dx = NULL, *dy = NULL;
    hx_gemm_scratch gs = {};
    cudaStream_t st = NULL;
    hx_status s = HX_OK;
    cudaError_t rc = cudaStreamCreate(&st);
    if (rc == cudaSuccess) rc = cudaMalloc((void **)&dw, rb * rows);
    if (rc == cudaSuccess) rc = cudaMalloc((void **)&dx, sizeof(float) * cols * n);
    if (rc == cudaSuccess) rc = cudaMalloc((void **)&dy, sizeof(float) * rows * n);
    float2 *ds = NULL;
    const int np = hx_k_mmq_pad(n); // mmq's padded token count (>= n)
    if (rc == cudaSuccess && q8) rc = cudaMalloc((void **)&xq, (size_t)cols * np);
    if (rc == cudaSuccess && q8) rc = cudaMalloc((void **)&xd, sizeof(float) * (cols / 32) * n);
    if (rc == cudaSuccess && q8) rc = cudaMalloc((void **)&ds, sizeof(float2) * (cols / 32) * np);
    if (rc == cudaSuccess) rc = cudaMemcpy(dw, w, rb * rows, cudaMemcpyHostToDevice);
    if (rc == cudaSuccess) rc = cudaMemcpy(dx, x, sizeof(float) * cols * n, cudaMemcpyHostToDevice);
    if (rc == cudaSuccess) rc = cudaMemset(dy, 0xff, sizeof(float) * rows * n); // NaN poison
    if (rc == cudaSuccess && cublasCreate(&gs.blas) != CUBLAS_STATUS_SUCCESS) rc = cudaErrorUnknown;
    W.d = dw;
    const hx_dmat *Ws[1] = {&W};
    float *ys[1] = {dy};
    // one product: the float kernels (or cuBLAS) or, with q8, quantize x + the dp4a kernel
    auto run = [&]() {
        if (!q8) return hx_k_linear(st, &gs, &W, dx, n, dy, NULL, false, dv);
        if (tile) {
            cudaError_t r = hx_k_quant_q8_rows(st, dx, n, cols, xq, xd);
            return r == cudaSuccess ? hx_k_mvq_cols(st, &W, xq, xd, n, dy, NULL, false) : r;
        }
        if (n > 1) {
            cudaError_t r = hx_k_mmq_quant(st, dx, NULL, 0.0f, n, cols, xq, ds);
            return r == cudaSuccess ? hx_k_mmq(st, 1, Ws, xq, ds, n, ys, NULL, false, -1, dv) : r;
        }
        cudaError_t r = hx_k_quant_q8(st, dx, NULL, 0.0f, cols, xq, xd);
        return r == cudaSuccess ? hx_k_mvq(st, 1, Ws, xq, xd, ys, NULL, false, -1, dv) : r;
    };
    if (rc == cudaSuccess) rc = run();
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(st);
    if (rc == cudaSuccess) rc = cudaMemcpy(y, dy, sizeof(float) * rows * n, cudaMemcpyDeviceToHost);
    // Timing as in decode: NG products captured in one CUDA graph (launch cost
    // as in the decode graph), cycling over copies of W that together exceed
    // the L2 cache, so the weights come from DRAM as they do in a model.
    uint8_t *dcopies = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t gexec = NULL;
    if (rc == cudaSuccess && ms_out) {
        size_t wb = rb * rows;
        int ncopy = (int)(((size_t)256 << 20) / wb + 1);
        if (ncopy > 32) ncopy = 32;
        const int NG = 32;
        rc = cudaMalloc((void **)&dcopies, wb * ncopy);
        for (int i = 0; i < ncopy && rc == cudaSuccess; i++) rc = cudaMemcpy(dcopies + wb * i, w, wb, cudaMemcpyHostToDevice);
        if (rc == cudaSuccess) rc = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
        for (int i = 0; i < NG && rc == cudaSuccess; i++) {
            W.d = dcopies + wb * (i % ncopy);
            rc = run();
        }
        if (rc == cudaSuccess) rc = cudaStreamEndCapture(st, &graph);
        else { cudaGraph_t g = NULL; cudaStreamEndCapture(st, &g); if (g) cudaGraphDestroy(g); }
        if (rc == cudaSuccess) rc = cudaGraphInstantiate(&gexec, graph, 0);
        cudaEvent_t t0, t1;
        cudaEventCreate(&t0); cudaEventCreate(&t1);
        std::vector<float> ms;
        for (int r = 0; r < reps / 8 + 5 && rc == cudaSuccess; r++) {
            cudaEventRecord(t0, st);
            rc = cudaGraphLaunch(gexec, st);
            cudaEventRecord(t1, st);
            if (rc == cudaSuccess) rc = cudaEventSynchronize(t1);
            float t = 0;
            cudaEventElapsedTime(&t, t0, t1);
            if (r >= 5) ms.push_back(t / NG);
        }
        cudaEventDestroy(t0); cudaEventDestroy(t1);
        *ms_out = median(ms);
    }
    if (gexec) cudaGraphExecDestroy(gexec);
    if (graph) cudaGraphDestroy(graph);
    cudaFree(dcopies);
    if (rc != cudaSuccess) s = cfail(e, rc, __FILE__, __LINE__, "linear check");
    if (gs.wh) cudaFree(gs.wh);
    if (gs.xh) cudaFree(gs.xh);
    if (gs.blas) cublasDestroy(gs.blas);
    cudaFree(dw); cudaFree(dx); cudaFree(dy); cudaFree(xq); cudaFree(xd); cudaFree(ds);
    if (st) cudaStreamDestroy(st);
    return s;
}
