/*
 * tk.h -- public C interface of libtk, the tkc kernel library.
 *
 * libtk embeds the cubin that tkc builds from kernels.tk and exposes one C
 * function per kernel.  Every function takes tensor descriptors (device
 * pointer, dtype, shape, strides in elements) and a CUstream, validates
 * every argument before launching anything, and returns a tk_status.  On
 * failure tk_last_error() names the bad argument.  The library never
 * prints and never exits.  It uses the calling thread's current CUDA
 * context, or makes device 0's primary context current if there is none,
 * and is safe to call from several threads (docs/runtime.md).
 *
 * Tensors are never allocated by the library: the caller passes outputs.
 * tk_sf_desc() computes the shape and strides TileKernels uses for
 * scale-factor buffers, so callers can allocate them.
 */
#ifndef TK_H
#define TK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libtk.so (built with hidden visibility by default). */
#if defined(__GNUC__)
#define TK_API __attribute__((visibility("default")))
#else
#define TK_API
#endif

/* Opaque so that tk.h does not require cuda.h; pass a CUstream. */
typedef struct CUstream_st *tk_stream;

#define TK_MAX_RANK 6

typedef enum tk_status {
    TK_SUCCESS = 0,
    TK_ERROR_INVALID_ARGUMENT = 1, /* a descriptor or option is wrong     */
    TK_ERROR_UNSUPPORTED = 2,      /* valid, but no kernel instance for it */
    TK_ERROR_NO_DEVICE = 3,        /* no driver, or no CUDA device         */
    TK_ERROR_DRIVER = 4,           /* a CUDA driver call failed            */
    TK_ERROR_LAUNCH = 5            /* the launch itself failed             */
} tk_status;

/* Element types.  Names match the .tk dtypes.  E2M1 data is stored packed,
 * two per byte; TileKernels' tensors for it are I8 with half the columns,
 * and that is what the API takes. */
typedef enum tk_dtype {
    TK_VOID = 0, TK_BOOL, TK_I8, TK_U8, TK_I16, TK_U16, TK_I32, TK_U32,
    TK_I64, TK_U64, TK_F16, TK_BF16, TK_F32, TK_F64, TK_E4M3, TK_E5M2,
    TK_E2M1, TK_UE8M0
} tk_dtype;

typedef struct tk_tensor {
    void *data;                     /* device pointer (a CUdeviceptr) */
    tk_dtype dtype;
    int rank;
    int64_t shape[TK_MAX_RANK];
    int64_t strides[TK_MAX_RANK];   /* in elements */
} tk_tensor;

/* Human-readable name of a status. */
TK_API const char *tk_status_string(tk_status status);
/* Message of the last failed call on this thread ("" if none). */
TK_API const char *tk_last_error(void);
/* Bytes per element (0 for TK_VOID; E2M1 reports 1: packed pairs). */
TK_API size_t tk_dtype_size(tk_dtype dtype);
/* TK_SUCCESS if a CUDA device is usable; loads nothing else. */
TK_API tk_status tk_device_check(void);

/* Convenience: a contiguous descriptor.  A rank outside [0, TK_MAX_RANK]
 * or a NULL shape gives rank -1, which every function rejects. */
TK_API tk_tensor tk_tensor_contiguous(void *data, tk_dtype dtype, int rank,
                                      const int64_t *shape);

/* Scale-factor layouts of tilekernels-spec.md section 3.5. */
typedef enum tk_sf_layout {
    TK_SF_ROW_MAJOR = 0,      /* f32 (nbm, nbk), strides (nbk, 1)         */
    TK_SF_COL_MAJOR = 1,      /* f32 (nbm, nbk), strides (1, align(nbm,4))*/
    TK_SF_PACKED_UE8M0 = 2    /* i32 (nbm, ceil(nbk/4)),
                                 strides (1, align(nbm,4)); byte k%4 of
                                 word [i, k/4] is block (i,k)'s exponent */
} tk_sf_layout;

/* Fills *desc (data NULL) with the dtype, shape and strides of the SF
 * tensor for a (rows, cols) matrix cut into (block_m, block_k) blocks,
 * and *bytes with the allocation it needs (padding included). */
TK_API tk_status tk_sf_desc(int64_t rows, int64_t cols, int block_m,
                            int block_k, tk_sf_layout layout, tk_tensor *desc,
                            size_t *bytes);

/* ---- transpose (tilekernels-spec.md section 7) ----------------------- */

/* out[b, j, i] = x[b, i, j].  x (B, X, Y) of any 1-, 2- or 4-byte dtype
 * but e2m1 (transposition only moves bits) with X % 64 == 0,
 * Y % 64 == 0, stride[2] == 1, stride[1] % 4 == 0, stride[1] >= Y and
 * stride[0] == X * stride[1]; out (B, Y, X) contiguous, same dtype. */
TK_API tk_status tk_batched_transpose(const tk_tensor *x,
                                      const tk_tensor *out, tk_stream stream);
/* 2-D form: x (X, Y) with a row stride >= Y, out (Y, X) contiguous. */
TK_API tk_status tk_transpose(const tk_tensor *x, const tk_tensor *out,
                              tk_stream stream);

/* ---- casts (tilekernels-spec.md section 6) --------------------------- */

/* per_token_cast to e4m3: x (T, H) f32 or bf16, row stride any multiple
 * of the 16-byte vector is fast, any other row stride works; H % 64 == 0.
 * One scale per row per num_per_channels (32, 64 or 128) columns.
 * out (T, H) e4m3 contiguous; out_sf as tk_sf_desc(T, H, 1,
 * num_per_channels, sf_layout) describes.  TK_SF_PACKED_UE8M0 requires
 * round_sf. */
TK_API tk_status tk_per_token_cast(const tk_tensor *x, int num_per_channels,
                                   bool round_sf, tk_sf_layout sf_layout,
                                   const tk_tensor *out,
                                   const tk_tensor *out_sf, tk_stream stream);

/* out = to_dtype(f32(x) * sf) with x (T, H) e4m3, H % 64 == 0, sf in any
 * layout of tk_sf_layout for (block_m, block_k) blocks (layout read from
 * its dtype and strides), out (T, H) bf16 or f32 contiguous.  Blocks:
 * 1x32, 1x64, 1x128, 128x128, 128x1, 32x32 (f32 SF); 1x32, 1x64, 1x128,
 * 128x128 (packed); others give TK_ERROR_UNSUPPORTED. */
TK_API tk_status tk_cast_back(const tk_tensor *x, const tk_tensor *sf,
                              int block_m, int block_k, const tk_tensor *out,
                              tk_stream stream);
/* cast_back with (1, num_per_channels) blocks. */
TK_API tk_status tk_per_token_cast_back(const tk_tensor *x,
                                        const tk_tensor *sf,
                                        int num_per_channels,
                                        const tk_tensor *out,
                                        tk_stream stream);

#ifdef __cplusplus
}
#endif
#endif
