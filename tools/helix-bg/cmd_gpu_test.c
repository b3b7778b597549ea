/* cmd_gpu_test.c — helix-bg gpu-test: for now reports the CUDA device (issue 4);
 * bandwidth / GEMM / matvec measurements come with the kernels. */
#include <stdio.h>
#include "cli.h"
#include "helix.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

int cmd_gpu_test(int argc, char **argv) {
    (void)argc; (void)argv;
#ifdef HX_HAVE_CUDA
    hx_error e = {0};
    hx_cuda_device dev;
    if (hx_cuda_init(-1, &dev, &e) != HX_OK) {
        fprintf(stderr, "gpu-test: %s\n", e.msg);
        return 1;
    }
    printf("device %d: %s (sm_%d%d, %d SMs, %.1f GiB)\n", dev.index, dev.name, dev.cc_major,
           dev.cc_minor, dev.n_sm, (double)dev.total_mem / (1024.0 * 1024.0 * 1024.0));
    printf("gpu-test: bandwidth, GEMM and matvec measurements are not built yet (issue 4)\n");
    return 0;
#else
    fprintf(stderr, "gpu-test: this helix-bg was built without CUDA (configure with -DHX_CUDA=ON and nvcc on PATH)\n");
    return 1;
#endif
}
