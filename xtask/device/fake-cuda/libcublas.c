// A stand-in for NVIDIA's cuBLAS (libcublas.so.13) beside the stand-in driver (`libcuda.c`), for
// `xtask/device/cuda-check.sh`: the calls of elmo-kernels' `cuda_blas.rs` (handle, stream, the
// strided batched GEMM), the GEMM computed on the host over the stand-in's "device" memory, which
// is host memory, in BLAS's column-major conventions, when $FAKECUBLAS_COMPUTE is set (else, as
// the stand-in's kernels, it writes nothing: a training step's products would take minutes on
// the host). It checks, without a GPU, that the pointers, offsets, leading dimensions, strides
// and types that the `cuda` build hands cuBLAS give the product (`bench_train --blas-check
// cuda`). The calls are counted into $FAKECUBLAS_REPORT.<pid>.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"

typedef int cublasStatus_t;
enum { SUCCESS = 0, INVALID_VALUE = 7, NOT_SUPPORTED = 15 };
enum { R_32F = 0, R_16F = 2, R_16BF = 14 };
enum { OP_N = 0, OP_T = 1 };
enum { COMPUTE_32F = 68 };

static unsigned long long gemms, flops;
static void report(void) {
    FILE *f = open_report("FAKECUBLAS_REPORT");
    if (!f) return;
    fprintf(f, "gemms %llu\nflops %llu\n", gemms, flops);
    fclose(f);
}

cublasStatus_t cublasCreate_v2(void **handle) {
    static int registered;
    if (!registered) registered = !atexit(report);
    *handle = malloc(16);
    return SUCCESS;
}
cublasStatus_t cublasDestroy_v2(void *handle) { free(handle); return SUCCESS; }
cublasStatus_t cublasSetStream_v2(void *handle, void *stream) { return SUCCESS; }

static float load(const void *base, long long i, int type) {
    if (type == R_32F) return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    if (type == R_16BF) {
        uint32_t bits = (uint32_t)h << 16;
        float x;
        memcpy(&x, &bits, 4);
        return x;
    }
    int exponent = (h >> 10) & 31, mantissa = h & 1023;
    float x = exponent == 0 ? ldexpf((float)mantissa, -24)
              : exponent == 31 ? (mantissa ? NAN : INFINITY)
                               : ldexpf((float)(mantissa | 1024), exponent - 25);
    return (h & 0x8000) ? -x : x;
}

cublasStatus_t cublasGemmStridedBatchedEx(void *handle, int transa, int transb, int m, int n,
                                          int k, const void *alpha, const void *A, int atype,
                                          int lda, long long strideA, const void *B, int btype,
                                          int ldb, long long strideB, const void *beta, void *C,
                                          int ctype, int ldc, long long strideC, int batch,
                                          int compute, int algo) {
    if (ctype != R_32F || compute != COMPUTE_32F) return NOT_SUPPORTED;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || ldc < (m > 1 ? m : 1)) return INVALID_VALUE;
    if (lda < ((transa == OP_N ? m : k) > 1 ? (transa == OP_N ? m : k) : 1)) return INVALID_VALUE;
    if (ldb < ((transb == OP_N ? k : n) > 1 ? (transb == OP_N ? k : n) : 1)) return INVALID_VALUE;
    gemms++;
    flops += 2ull * m * n * k * batch;
    static int on = -1;
    if (on < 0) on = getenv("FAKECUBLAS_COMPUTE") != NULL;
    if (!on) return SUCCESS;
    float a = *(const float *)alpha, b = *(const float *)beta;
    float *c = C;
    for (int s = 0; s < batch; s++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float sum = 0;
                for (int l = 0; l < k; l++) {
                    long long ai = s * strideA + (transa == OP_N ? i + (long long)l * lda : l + (long long)i * lda);
                    long long bi = s * strideB + (transb == OP_N ? l + (long long)j * ldb : j + (long long)l * ldb);
                    sum += load(A, ai, atype) * load(B, bi, btype);
                }
                float *out = &c[s * strideC + i + (long long)j * ldc];
                *out = a * sum + (b != 0 ? b * *out : 0);
            }
    return SUCCESS;
}
