// A stand-in for NVIDIA's driver library (libcuda.so.1) on a machine without a GPU, for
// `xtask/device/cuda-check.sh`: it answers as an H100 SXM would (compute capability 9.0, 132
// SMs, 227 KiB of shared memory per block), keeps "device" memory in host memory (zeroed), writes
// every module the runtime loads (PTX from NVRTC) to $FAKECUDA_PTX_DIR/<pid>-module-<n>.ptx, and counts kernel launches
// per kernel into $FAKECUDA_REPORT.<pid> without running them: the `cuda` build's host code, its
// kernel generation and NVRTC run for real, the kernels' arithmetic does not (every result is 0).
// The subset of the driver API that cubecl-cuda 0.11 (through cudarc 0.19) and NVRTC 13 call.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "report.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef void *CUcontext, *CUstream, *CUevent;

enum { OK = 0, ERR_NOT_SUPPORTED = 801, ERR_NOT_FOUND = 500, ERR_OOM = 2 };

// Every driver call is counted by name (the report's `call` lines: allocations, frees,
// synchronisations and copies per run, which on a real GPU cost time that no kernel shows).
typedef struct {
    const char *name;
    unsigned long long calls;
} Call;
static Call calls[256];
static int n_calls;

static void trace(const char *fn) {
    static int on = -1;
    if (on < 0) on = getenv("FAKECUDA_TRACE") != NULL;
    if (on) fprintf(stderr, "fakecuda: %s\n", fn);
    for (int i = 0; i < n_calls; i++)
        if (calls[i].name == fn) {
            calls[i].calls++;
            return;
        }
    if (n_calls < 256) calls[n_calls++] = (Call){fn, 1};
}
#define T() trace(__func__)

// With $FAKECUDA_TIMELINE, one line per kernel launch, device-to-host copy and event wait, and
// two around each device-to-device copy or memset, into $FAKECUDA_TIMELINE.<pid>: the time (µs,
// CLOCK_MONOTONIC), the event and the kernel or the bytes. Where the host leaves the device
// without work on a GPU (`launch_gaps.py`: each step's longest stretch without a launch).
static void timeline(const char *event, const char *detail, unsigned long long bytes) {
    static FILE *out;
    static int opened;
    if (!opened) {
        opened = 1;
        out = open_report("FAKECUDA_TIMELINE");
    }
    if (!out) return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    fprintf(out, "%.1f %s %s %llu\n", t.tv_sec * 1e6 + t.tv_nsec / 1e3, event, detail, bytes);
}

// ---- modules and launches ----------------------------------------------------------------
typedef struct {
    char *name;
    unsigned long long launches;
    unsigned long long threads;
    int n_params;
    int param_bytes[64]; // each parameter's size, from the module's PTX (8 for a pointer)
} Func;
static Func funcs[4096];
static int n_funcs;
static int n_modules;
static unsigned long long n_launches;

static void report(void) {
    FILE *f = open_report("FAKECUDA_REPORT");
    if (!f) return;
    fprintf(f, "modules %d\nlaunches %llu\n", n_modules, n_launches);
    for (int i = 0; i < n_calls; i++) fprintf(f, "call\t%llu\t%s\n", calls[i].calls, calls[i].name);
    for (int i = 0; i < n_funcs; i++)
        fprintf(f, "%llu\t%llu\t%s\n", funcs[i].launches, funcs[i].threads, funcs[i].name);
    fclose(f);
}

CUresult cuInit(unsigned flags) {
    T();
    static int once;
    if (!once++) atexit(report);
    return OK;
}
CUresult cuDriverGetVersion(int *v) { T(); *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *n) { T(); *n = 1; return OK; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { T(); if (ordinal != 0) return 101; *d = 0; return OK; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    T();
    snprintf(name, len, "NVIDIA H100 80GB HBM3");
    return OK;
}
CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) { T(); snprintf(id, len, "0000:01:00.0"); return OK; }
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    T();
    const char *gb = getenv("FAKECUDA_MEM_GB");
    *bytes = (size_t)(gb ? atol(gb) : 80) << 30;
    return OK;
}
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
    T();
    cuDeviceTotalMem_v2(total, 0);
    *free_b = *total;
    return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    T();
    switch (attr) {
    case 1: *v = 1024; break;                     // max threads per block
    case 2: case 3: *v = 1024; break;             // max block dim x, y
    case 4: *v = 64; break;                       // max block dim z
    case 5: *v = 2147483647; break;               // max grid dim x
    case 6: case 7: *v = 65535; break;            // max grid dim y, z
    case 8: *v = 49152; break;                    // shared memory per block
    case 10: *v = 32; break;                      // warp size
    case 16: *v = 132; break;                     // multiprocessors
    case 41: *v = 1; break;                       // unified addressing
    case 75: *v = 9; break;                       // compute capability major
    case 76: *v = 0; break;                       // minor
    case 81: *v = 233472; break;                  // shared memory per multiprocessor
    case 97: *v = 232448; break;                  // shared memory per block, opt-in
    case 115: *v = 1; break;                      // memory pools
    default:
        if (getenv("FAKECUDA_TRACE")) fprintf(stderr, "fakecuda: attribute %d -> 0\n", attr);
        *v = 0;
    }
    return OK;
}
CUresult cuDeviceGetLuid(char *luid, unsigned *mask, CUdevice d) { T(); return ERR_NOT_SUPPORTED; }

// ---- contexts and streams ----------------------------------------------------------------
static int the_context;
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { T(); *c = &the_context; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { T(); return OK; }
CUresult cuCtxSetCurrent(CUcontext c) { T(); return OK; }
CUresult cuCtxGetCurrent(CUcontext *c) { T(); *c = &the_context; return OK; }
CUresult cuStreamGetCtx(CUstream s, CUcontext *c) { T(); *c = &the_context; return OK; }
CUresult cuCtxSynchronize(void) { T(); return OK; }
CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) { T(); *least = 0; *greatest = -5; return OK; }
CUresult cuCtxGetDevice(CUdevice *d) { T(); *d = 0; return OK; }

static CUstream new_handle(void) { return malloc(16); }
CUresult cuStreamCreate(CUstream *s, unsigned flags) { T(); *s = new_handle(); return OK; }
CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio) { T(); *s = new_handle(); return OK; }
CUresult cuStreamDestroy_v2(CUstream s) { T(); return OK; }
CUresult cuStreamSynchronize(CUstream s) { T(); return OK; }
CUresult cuStreamQuery(CUstream s) { T(); return OK; }
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) { T(); return OK; }

CUresult cuEventCreate(CUevent *e, unsigned flags) { T(); *e = new_handle(); return OK; }
CUresult cuEventRecord(CUevent e, CUstream s) { T(); return OK; }
CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned flags) { T(); return OK; }
CUresult cuEventSynchronize(CUevent e) { T(); timeline("wait", "event", 0); return OK; }
CUresult cuEventQuery(CUevent e) { T(); return OK; }
CUresult cuEventDestroy_v2(CUevent e) { T(); return OK; }
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { T(); *ms = 0.001f; return OK; }
CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { T(); *ms = 0.001f; return OK; }

// ---- memory: "device" addresses are host addresses ---------------------------------------
static CUresult alloc(CUdeviceptr *p, size_t n) {
    void *m = calloc(1, n ? n : 1);
    if (!m) return ERR_OOM;
    *p = (CUdeviceptr)(uintptr_t)m;
    return OK;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { T(); return alloc(p, n); }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { T(); return alloc(p, n); }
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned esz) {
    T();
    *pitch = (w + 511) / 512 * 512;
    return alloc(p, *pitch * h);
}
CUresult cuMemFree_v2(CUdeviceptr p) { T(); free((void *)(uintptr_t)p); return OK; }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { T(); free((void *)(uintptr_t)p); return OK; }
CUresult cuMemAllocHost_v2(void **p, size_t n) { T(); *p = calloc(1, n ? n : 1); return *p ? OK : ERR_OOM; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) { T(); return cuMemAllocHost_v2(p, n); }
CUresult cuMemFreeHost(void *p) { T(); free(p); return OK; }
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) { T(); return OK; }
CUresult cuMemHostUnregister(void *p) { T(); return OK; }

#define PTR(x) ((void *)(uintptr_t)(x))
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { T(); memcpy(PTR(d), s, n); return OK; }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) {
    T();
    timeline("read", "sync", n);
    memcpy(d, PTR(s), n);
    return OK;
}
// Device-to-device copies and memsets run on the host here and are asynchronous on a GPU: the
// timeline brackets each ("copy" KIND BYTES ... "copied"), for launch_gaps.py to take out.
static void device_copy(const char *kind, void *d, const void *s, int v, size_t n) {
    timeline("copy", kind, n);
    if (s) memmove(d, s, n);
    else memset(d, v, n);
    timeline("copied", kind, n);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { T(); device_copy("dtod", PTR(d), PTR(s), 0, n); return OK; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { T(); memcpy(PTR(d), s, n); return OK; }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) {
    T();
    timeline("read", "async", n);
    memcpy(d, PTR(s), n);
    return OK;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { T(); device_copy("dtod", PTR(d), PTR(s), 0, n); return OK; }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { T(); device_copy("memset", PTR(d), NULL, v, n); return OK; }
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { T(); device_copy("memset", PTR(d), NULL, v, n); return OK; }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s) {
    T();
    timeline("copy", "memset", 4 * n);
    for (size_t i = 0; i < n; i++) ((unsigned *)PTR(d))[i] = v;
    timeline("copied", "memset", 4 * n);
    return OK;
}

typedef struct {
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} Memcpy2D;
enum { MEM_HOST = 1, MEM_DEVICE = 2, MEM_ARRAY = 3, MEM_UNIFIED = 4 };
CUresult cuMemcpy2DAsync_v2(const Memcpy2D *c, CUstream s) {
    T();
    if (c->srcMemoryType == MEM_ARRAY || c->dstMemoryType == MEM_ARRAY) return ERR_NOT_SUPPORTED;
    const char *src = c->srcMemoryType == MEM_HOST ? c->srcHost : PTR(c->srcDevice);
    char *dst = c->dstMemoryType == MEM_HOST ? c->dstHost : PTR(c->dstDevice);
    int on_device = c->srcMemoryType != MEM_HOST && c->dstMemoryType != MEM_HOST;
    if (on_device) timeline("copy", "dtod", c->WidthInBytes * c->Height);
    for (size_t row = 0; row < c->Height; row++)
        memmove(dst + (c->dstY + row) * c->dstPitch + c->dstXInBytes,
                src + (c->srcY + row) * c->srcPitch + c->srcXInBytes, c->WidthInBytes);
    if (on_device) timeline("copied", "dtod", c->WidthInBytes * c->Height);
    return OK;
}
CUresult cuMemcpy2D_v2(const Memcpy2D *c) { T(); return cuMemcpy2DAsync_v2(c, NULL); }

// ---- modules -----------------------------------------------------------------------------
typedef struct {
    int index;
    char *ptx;
} Module;

CUresult cuModuleLoadData(void **module, const void *image) {
    T();
    Module *m = malloc(sizeof *m);
    m->index = n_modules++;
    m->ptx = strdup((const char *)image);
    const char *dir = getenv("FAKECUDA_PTX_DIR");
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%d-module-%05d.ptx", dir, (int)getpid(), m->index);
        FILE *f = fopen(path, "w");
        if (f) {
            fputs(m->ptx, f);
            fclose(f);
        }
    }
    *module = m;
    return OK;
}
CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned n, void *o, void **v) {
    return cuModuleLoadData(module, image);
}
CUresult cuModuleUnload(void *module) { T(); return OK; }
// The sizes of an entry's parameters, from its PTX signature after `.entry name(`: `.param
// .u64 x` is 8 bytes, `.param .align 4 .b8 x[80]` (a struct passed by value: CubeCL's shapes,
// strides and scalars) 80. Returns their number (-1 where the signature is not understood).
static int parameter_sizes(const char *p, int *bytes) {
    int n = 0;
    while ((p = strstr(p, ".param")) && n < 64) {
        const char *end = strchr(p, '\n');
        if (!end) break;
        int size = 0;
        const char *bracket = memchr(p, '[', end - p);
        if (strncmp(p, ".param .u64", 11) == 0 || strncmp(p, ".param .b64", 11) == 0 ||
            strncmp(p, ".param .s64", 11) == 0 || strncmp(p, ".param .f64", 11) == 0)
            size = 8;
        else if (strncmp(p, ".param .u32", 11) == 0 || strncmp(p, ".param .b32", 11) == 0 ||
                 strncmp(p, ".param .s32", 11) == 0 || strncmp(p, ".param .f32", 11) == 0)
            size = 4;
        else if (bracket)
            size = atoi(bracket + 1); // `.b8 x[N]` (arrays of wider elements are not used)
        else
            return -1;
        bytes[n++] = size;
        const char *close = memchr(p, ')', end - p);
        if (close) break;
        p = end + 1;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == ')') break;
    }
    return n;
}

CUresult cuModuleGetFunction(void **func, void *module, const char *name) {
    T();
    Module *m = module;
    // The entry point must be in the module's PTX.
    char needle[1024];
    snprintf(needle, sizeof needle, ".entry %s(", name);
    if (!strstr(m->ptx, needle)) {
        snprintf(needle, sizeof needle, ".entry %s\n", name);
        if (!strstr(m->ptx, needle)) return ERR_NOT_FOUND;
    }
    if (n_funcs == (int)(sizeof funcs / sizeof *funcs)) return ERR_OOM;
    Func *f = &funcs[n_funcs++];
    char full[1200];
    snprintf(full, sizeof full, "module-%05d:%s", m->index, name);
    f->name = strdup(full);
    f->n_params = parameter_sizes(strstr(m->ptx, needle) + strlen(needle), f->param_bytes);
    *func = f;
    return OK;
}
CUresult cuFuncSetAttribute(void *f, int attr, int value) { T(); return OK; }
CUresult cuFuncGetAttribute(int *v, int attr, void *f) { T(); *v = 0; return OK; }
CUresult cuFuncSetCacheConfig(void *f, int c) { T(); return OK; }

// With $FAKECUDA_LAUNCHES, one line per launch into $FAKECUDA_LAUNCHES.<pid>: the kernel, its
// grid and block, its dynamic shared memory, and the 32-bit words of every parameter passed by
// value other than a pointer (CubeCL's struct of shapes, strides and scalars: a matmul's sizes,
// for `launch_shapes.py`).
static void log_launch(Func *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shared, void **params) {
    static FILE *out;
    static int opened;
    if (!opened) {
        opened = 1;
        const char *path = getenv("FAKECUDA_LAUNCHES");
        if (path) {
            char file[4096];
            snprintf(file, sizeof file, "%s.%d", path, (int)getpid());
            out = fopen(file, "w");
        }
    }
    if (!out) return;
    fprintf(out, "%s\t%u %u %u\t%u %u %u\t%u\t", f->name, gx, gy, gz, bx, by, bz, shared);
    for (int i = 0; params && i < f->n_params; i++) {
        if (f->param_bytes[i] == 8) continue;
        const unsigned char *value = params[i];
        for (int w = 0; w + 4 <= f->param_bytes[i]; w += 4) {
            unsigned word;
            memcpy(&word, value + w, 4);
            fprintf(out, "%u ", word);
        }
        fputs("| ", out);
    }
    fputc('\n', out);
}

CUresult cuLaunchKernel(void *func, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                        void **extra) {
    T();
    Func *f = func;
    f->launches++;
    f->threads += (unsigned long long)gx * gy * gz * bx * by * bz;
    n_launches++;
    log_launch(f, gx, gy, gz, bx, by, bz, shared, params);
    timeline("launch", f->name, (unsigned long long)gx * gy * gz * bx * by * bz);
    if ((unsigned long long)bx * by * bz > 1024 || shared > 232448) return 1; // invalid value
    return OK;
}

// ---- errors ------------------------------------------------------------------------------
CUresult cuGetErrorString(CUresult e, const char **s) { *s = "fakecuda error"; return OK; }
CUresult cuGetErrorName(CUresult e, const char **s) { *s = "CUDA_ERROR_FAKE"; return OK; }

// NVRTC asks the driver for its private export tables (the machine's GPU, for `-arch=native`);
// there is none here.
CUresult cuGetExportTable(const void **table, const void *id) { T(); *table = NULL; return ERR_NOT_SUPPORTED; }
