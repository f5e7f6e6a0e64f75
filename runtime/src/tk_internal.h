/*
 * tk_internal.h -- what libtk's sources, the generated launchers
 * (tk_kernels.h from `tkc --emit=header`), the tests and tkbench share but
 * applications never see.
 *
 * The CUDA driver is reached only through dlopen("libcuda.so.1"), so that
 * a machine without a driver gets TK_ERROR_NO_DEVICE instead of a loader
 * failure.  tk__driver() loads it once (thread-safe), calls cuInit, and
 * makes the primary context of the current device (device 0 if none is
 * current) current on the calling thread.
 */
#ifndef TK_INTERNAL_H
#define TK_INTERNAL_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

#include "tk.h"

#if defined(__GNUC__)
#define TK_INTERNAL __attribute__((visibility("default")))
#else
#define TK_INTERNAL
#endif

/* The driver entry points libtk, the tests and tkbench use. */
typedef struct tk__driver_api {
    CUresult (*cuInit)(unsigned int);
    CUresult (*cuDriverGetVersion)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*cuFuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned,
                               unsigned, unsigned, unsigned, unsigned,
                               CUstream, void **, void **);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*cuMemsetD32)(CUdeviceptr, unsigned int, size_t);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuGetErrorString)(CUresult, const char **);
    /* streams and graph capture (tests prove entry points never sync) */
    CUresult (*cuStreamCreate)(CUstream *, unsigned int);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
    CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph,
                                            unsigned long long);
    CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
    CUresult (*cuGraphExecDestroy)(CUgraphExec);
    CUresult (*cuGraphDestroy)(CUgraph);
    CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    /* grid-wide barriers need a cooperative launch */
    CUresult (*cuLaunchCooperativeKernel)(CUfunction, unsigned, unsigned,
                                          unsigned, unsigned, unsigned,
                                          unsigned, unsigned, CUstream,
                                          void **);
    CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction,
                                                           int, size_t);
    /* cluster launches (launch.c); NULL when the driver lacks it */
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
    /* TMA descriptors (tensor_map.c) */
    CUresult (*cuTensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType,
                                       cuuint32_t, void *, const cuuint64_t *,
                                       const cuuint64_t *, const cuuint32_t *,
                                       const cuuint32_t *, CUtensorMapInterleave,
                                       CUtensorMapSwizzle, CUtensorMapL2promotion,
                                       CUtensorMapFloatOOBfill);
} tk__driver_api;

/* Loads the driver (once) and makes a context current; on failure returns
 * TK_ERROR_NO_DEVICE or TK_ERROR_DRIVER with tk_last_error() set. */
TK_INTERNAL tk_status tk__driver(const tk__driver_api **api);

/* Records a message for tk_last_error() on this thread and returns
 * status.  Never prints. */
TK_INTERNAL tk_status tk__fail(tk_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
TK_INTERNAL const char *tk__dtype_name(tk_dtype dtype);

/* Launches the kernel `name` of the embedded cubin (the module is loaded
 * lazily, once per context; functions are cached).  shared_bytes is the
 * dynamic shared memory size; above 48 KiB the function's limit is raised
 * first.  Driver errors become TK_ERROR_DRIVER / TK_ERROR_LAUNCH. */
TK_INTERNAL tk_status tk__launch(const char *name, const uint32_t grid[3],
                                 uint32_t threads, uint32_t shared_bytes,
                                 void **params, tk_stream stream);

/* tk__launch for a kernel with a cluster (.reqnctapercluster): launches
 * through cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION.
 * Each grid dimension must be a multiple of the cluster's (the generated
 * launchers round it up).  A driver without cuLaunchKernelEx is
 * TK_ERROR_UNSUPPORTED. */
TK_INTERNAL tk_status tk__launch_cluster(const char *name, const uint32_t grid[3],
                                         const uint32_t cluster[3], uint32_t threads,
                                         uint32_t shared_bytes, void **params,
                                         tk_stream stream);

/* The CUtensorMap of a TMA copy (docs/hopper.md 8; tensor_map.c): the
 * tensor's dtype (8-bit floats as UINT8), dims and byte strides innermost
 * first, element strides 1, no interleave, the swizzle (0 or 128 bytes;
 * 32 and 64 are accepted too), 128-byte L2 promotion, zero fill out of
 * bounds.  box[0..rank) is row-major (outermost first), like the IR's.
 * Checked first, without the driver, so a bad tensor is
 * TK_ERROR_INVALID_ARGUMENT naming `kernel: name` even on a machine with
 * no GPU: rank 1..5 and equal to the tensor's, a dtype TMA can move,
 * base 16-byte aligned, last stride 1, other strides multiples of 16
 * bytes below 2^40, dims at most 2^32, box extents 1..256, the inner box
 * a multiple of 16 bytes and within the swizzle span.  An empty tensor
 * gets an all-zero map (its kernel never issues a copy of it: its loops
 * are empty).  Encodings are cached per (address, dtype, dims, strides,
 * box, swizzle) in a small lock-protected table, so a repeated launch
 * costs a lookup; the driver is needed only for a new encoding (no
 * driver: TK_ERROR_NO_DEVICE). */
TK_INTERNAL tk_status tk__tensor_map(const char *kernel, const char *name,
                                     const tk_tensor *tensor, int rank,
                                     const int64_t *box, int swizzle_bytes,
                                     CUtensorMap *out);

/* Records tk__fail(status, "<fmt>: <driver's error string> (CUresult N)"):
 * the common shape of every driver failure message. */
TK_INTERNAL tk_status tk__cuda_fail(tk_status status, CUresult result,
                                    const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- descriptor checks shared by api_*.c (tensor.c) -------------------
 * `function` and `argument` name the public function and its parameter in
 * the message, e.g. "tk_transpose: out: shape[0] is 7, expected 128". */

/* NULL descriptor, rank, negative shape or stride entries. */
TK_INTERNAL tk_status tk__check_tensor(const char *function,
                                       const char *argument,
                                       const tk_tensor *tensor, int rank);
/* dtype is one of allowed[0..count). */
TK_INTERNAL tk_status tk__check_dtype(const char *function,
                                      const char *argument,
                                      const tk_tensor *tensor,
                                      const tk_dtype *allowed, int count);
/* shape[dim] == expected; `meaning` says where expected comes from. */
TK_INTERNAL tk_status tk__check_dim(const char *function,
                                    const char *argument,
                                    const tk_tensor *tensor, int dim,
                                    int64_t expected, const char *meaning);
/* Row-major contiguous (a dimension of size 1 may have any stride). */
TK_INTERNAL tk_status tk__check_contiguous(const char *function,
                                           const char *argument,
                                           const tk_tensor *tensor);
/* The memory side, checked last: data non-NULL unless the tensor is
 * empty, 16-byte aligned (the kernels use 16-byte vector accesses), and
 * every dimension and the largest element offset within int32 (the
 * kernels index with 32-bit integers). */
TK_INTERNAL tk_status tk__check_storage(const char *function,
                                        const char *argument,
                                        const tk_tensor *tensor);
/* A (T, H) matrix with contiguous rows (strides[1] 1) that do not overlap
 * (strides[0] >= shape[1]); size-1 dimensions may have any stride. */
TK_INTERNAL tk_status tk__check_rows(const char *function,
                                     const char *argument,
                                     const tk_tensor *x);
/* True if some dimension is 0. */
TK_INTERNAL bool tk__tensor_empty(const tk_tensor *tensor);
/* Shape and strides of an SF layout (tk_sf_desc without the messages);
 * false if an argument is out of range or a size overflows. */
TK_INTERNAL bool tk__sf_layout(int64_t rows, int64_t cols, int64_t block_m,
                               int64_t block_k, tk_sf_layout layout,
                               tk_tensor *desc, size_t *bytes);

/* "TK_SF_ROW_MAJOR", ... or "<invalid layout>", for messages. */
TK_INTERNAL const char *tk__sf_layout_name(tk_sf_layout layout);
/* sf_layout is a tk_sf_layout, and TK_SF_PACKED_UE8M0 comes with round_sf. */
TK_INTERNAL tk_status tk__check_sf_layout(const char *function,
                                          tk_sf_layout layout, bool round_sf);
/* A rank-2 SF tensor against `expected` (tk__sf_layout's descriptor):
 * dtype, shape (meanings name where each size comes from), and strides,
 * except on size-1 dimensions, which may have any stride. */
TK_INTERNAL tk_status tk__check_sf_desc(const char *function,
                                        const char *argument,
                                        const tk_tensor *sf,
                                        const tk_tensor *expected,
                                        tk_sf_layout layout,
                                        const char *rows_meaning,
                                        const char *cols_meaning);
/* An i32 SF is read as packed UE8M0 (TileKernels' layout detection), which
 * is column-major: strides[0] must be 1 unless shape[0] is 1. */
TK_INTERNAL tk_status tk__check_packed_sf(const char *function,
                                          const char *argument,
                                          const tk_tensor *sf);
/* The packed int32 SF (rows, words) seen as bytes (rows, words, 4): word
 * [i, w] holds the exponents of blocks 4w .. 4w+3 of row i. */
TK_INTERNAL tk_tensor tk__packed_byte_view(const tk_tensor *sf,
                                           int64_t word_stride);

/* Name of the kernel instance the last tk_* call on this thread picked
 * ("per_token_cast__bf16_128_round"), "" if it picked none.  Set before
 * the launcher runs, so it is meaningful even when the launch fails for
 * want of a device: the tests check instance selection with it. */
TK_INTERNAL const char *tk__last_instance(void);
TK_INTERNAL void tk__set_last_instance(const char *name);

/* The embedded cubin (tk_cubin.c, generated from kernels.tk at build). */
extern const unsigned char tk__cubin[];
extern const size_t tk__cubin_size;

/* Integer helpers for launcher expressions: TileLang semantics (floor
 * division and modulo).  Divisor 0 yields 0 (the launcher checks
 * divisors of user values before using them). */
static inline int64_t tk__floordiv(int64_t a, int64_t b) {
    if (b == 0) return 0;
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t tk__floormod(int64_t a, int64_t b) {
    if (b == 0) return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t tk__ceildiv(int64_t a, int64_t b) {
    return -tk__floordiv(-a, b);
}
static inline int64_t tk__min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t tk__max(int64_t a, int64_t b) { return a > b ? a : b; }

#endif
