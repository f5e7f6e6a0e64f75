/*
 * cast_fp4.h -- what api_cast.c and api_cast_fp4.c share (private to
 * libtk): the SF output check and the entry
 * points of api_cast_fp4.c that tk_per_token_cast and the cast_back
 * functions of api_cast.c forward to.
 */
#ifndef TK_CAST_FP4_H
#define TK_CAST_FP4_H

#include "tk_internal.h"

/* out_sf against the layout tk_sf_desc gives (`expected`); a size-1
 * dimension may have any stride. */
tk_status tk__check_sf_output(const char *function, const tk_tensor *out_sf,
                              const tk_tensor *expected, tk_sf_layout layout);

/* True for the dtypes a packed FP4 tensor may have (I8 as in TileKernels,
 * U8, or E2M1 itself). */
bool tk__is_packed_fp4(tk_dtype dtype);

/* per_token_cast of f32 / bf16 x to e4m3 or packed e2m1 with the
 * per_token_quant kernels (quant_fp4.tk).  Arguments already validated by
 * the caller except num_per_channels and the layout/out/out_sf
 * consistency, which this checks.  out NULL: SF only; precomputed
 * non-NULL: read scales from it instead of writing out_sf. */
tk_status tk__per_token_quant(const char *function, const tk_tensor *x,
                              int num_per_channels, bool round_sf,
                              tk_sf_layout sf_layout, tk_dtype format,
                              const tk_tensor *out, const tk_tensor *out_sf,
                              const tk_tensor *precomputed, tk_stream stream);

/* cast_back from packed FP4 x (T, H / 2); sf already checked to have the
 * layout's shape for (block_m, block_k) blocks of (T, H). */
tk_status tk__cast_back_fp4(const char *function, const tk_tensor *x,
                            const tk_tensor *sf, bool packed, int block_m,
                            int block_k, const tk_tensor *out,
                            tk_stream stream);

#endif
