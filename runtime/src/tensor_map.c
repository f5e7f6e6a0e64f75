/*
 * tensor_map.c -- the TMA descriptors (CUtensorMap) the launchers pass to
 * kernels with TMA copies (docs/hopper.md 8, tk_internal.h).
 *
 * A launcher calls tk__tensor_map once per Kernel.tensor_maps entry, with
 * the tensor argument and the box the compiler chose.  The checks come
 * first and need no driver, so a tensor TMA cannot describe is an
 * invalid argument with a message naming it, on any machine.  The
 * encoding (cuTensorMapEncodeTiled, a pure host computation) is then
 * looked up in a cache: GEMM launches repeat with the same tensors, and
 * an encode costs microseconds while a lookup costs nanoseconds.
 *
 * The cache is a fixed table of TK_MAP_SLOTS entries, open addressing over
 * a window of TK_MAP_PROBES slots from the key's hash; when the window is
 * full, the first slot is overwritten (an eviction only costs a later
 * re-encode).  One mutex guards it; the encode itself happens outside.
 */
#include <pthread.h>
#include <string.h>

#include "tk_internal.h"

#define TK_MAP_MAX_RANK 5
#define TK_MAP_MAX_BOX 256
#define TK_MAP_SLOTS 256
#define TK_MAP_PROBES 8

/* Everything the encoding depends on. */
typedef struct tk__map_key {
    uintptr_t address;
    int32_t dtype, rank, swizzle;
    uint64_t dims[TK_MAP_MAX_RANK];    /* innermost first */
    uint64_t strides[TK_MAP_MAX_RANK]; /* bytes, of dims 1..rank-1 */
    uint32_t box[TK_MAP_MAX_RANK];     /* innermost first */
} tk__map_key;

typedef struct tk__map_entry {
    bool used;
    tk__map_key key;
    CUtensorMap map;
} tk__map_entry;

static pthread_mutex_t tk__map_mutex = PTHREAD_MUTEX_INITIALIZER;
static tk__map_entry tk__maps[TK_MAP_SLOTS];

/* FNV-1a over the key's bytes (the key is zero-initialised, padding
 * included, so equal keys hash equally). */
static size_t tk__map_hash(const tk__map_key *key)
{
    uint64_t hash = 1469598103934665603ull;
    const unsigned char *bytes = (const unsigned char *)key;
    for (size_t i = 0; i < sizeof *key; i++)
        hash = (hash ^ bytes[i]) * 1099511628211ull;
    return (size_t)(hash ^ (hash >> 31));
}

static bool tk__map_lookup(const tk__map_key *key, CUtensorMap *out)
{
    bool found = false;
    size_t first = tk__map_hash(key);
    pthread_mutex_lock(&tk__map_mutex);
    for (size_t i = 0; i < TK_MAP_PROBES && !found; i++) {
        tk__map_entry *entry = &tk__maps[(first + i) % TK_MAP_SLOTS];
        if (entry->used && memcmp(&entry->key, key, sizeof *key) == 0) {
            *out = entry->map;
            found = true;
        }
    }
    pthread_mutex_unlock(&tk__map_mutex);
    return found;
}

static void tk__map_store(const tk__map_key *key, const CUtensorMap *map)
{
    size_t first = tk__map_hash(key);
    pthread_mutex_lock(&tk__map_mutex);
    tk__map_entry *slot = &tk__maps[first % TK_MAP_SLOTS];
    for (size_t i = 0; i < TK_MAP_PROBES; i++) {
        tk__map_entry *entry = &tk__maps[(first + i) % TK_MAP_SLOTS];
        if (!entry->used || memcmp(&entry->key, key, sizeof *key) == 0) {
            slot = entry;
            break;
        }
    }
    slot->used = true;
    slot->key = *key;
    slot->map = *map;
    pthread_mutex_unlock(&tk__map_mutex);
}

/* The TMA element type of a dtype; false if TMA cannot move it.  The
 * 8-bit floats and scale bytes travel as UINT8: TMA copies bits and only
 * needs the size. */
static bool tk__map_dtype(tk_dtype dtype, CUtensorMapDataType *out)
{
    switch (dtype) {
    case TK_BOOL: case TK_I8: case TK_U8: case TK_E4M3: case TK_E5M2: case TK_UE8M0:
        *out = CU_TENSOR_MAP_DATA_TYPE_UINT8;
        return true;
    case TK_I16: case TK_U16: *out = CU_TENSOR_MAP_DATA_TYPE_UINT16; return true;
    case TK_I32: *out = CU_TENSOR_MAP_DATA_TYPE_INT32; return true;
    case TK_U32: *out = CU_TENSOR_MAP_DATA_TYPE_UINT32; return true;
    case TK_I64: *out = CU_TENSOR_MAP_DATA_TYPE_INT64; return true;
    case TK_U64: *out = CU_TENSOR_MAP_DATA_TYPE_UINT64; return true;
    case TK_F16: *out = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; return true;
    case TK_BF16: *out = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; return true;
    case TK_F32: *out = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; return true;
    case TK_F64: *out = CU_TENSOR_MAP_DATA_TYPE_FLOAT64; return true;
    case TK_VOID: case TK_E2M1: break;
    }
    return false;
}

static CUtensorMapSwizzle tk__map_swizzle(int bytes)
{
    switch (bytes) {
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;
    }
}

/* Fills key from the arguments after checking everything TMA requires. */
static tk_status tk__map_check(const char *kernel, const char *name, const tk_tensor *t,
                               int rank, const int64_t *box, int swizzle_bytes,
                               tk__map_key *key, CUtensorMapDataType *type)
{
    if (t == NULL || box == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: no tensor for its TMA descriptor",
                        kernel, name);
    if (rank < 1 || rank > TK_MAP_MAX_RANK || t->rank != rank)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: TMA needs rank 1 to %d, and the tensor's rank (%d) to be "
                        "the map's (%d)",
                        kernel, name, TK_MAP_MAX_RANK, t->rank, rank);
    if (!tk__map_dtype(t->dtype, type))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: TMA cannot copy %s elements", kernel,
                        name, tk__dtype_name(t->dtype));
    if (swizzle_bytes != 0 && swizzle_bytes != 32 && swizzle_bytes != 64 &&
        swizzle_bytes != 128)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: swizzle of %d bytes (0, 32, 64 "
                        "or 128)", kernel, name, swizzle_bytes);
    int64_t size = (int64_t)tk_dtype_size(t->dtype);
    memset(key, 0, sizeof *key);
    key->address = (uintptr_t)t->data;
    key->dtype = (int32_t)t->dtype;
    key->rank = rank;
    key->swizzle = swizzle_bytes;
    for (int i = 0; i < rank; i++) {
        int d = rank - 1 - i; /* tensor dim of TMA dim i */
        if (box[d] < 1 || box[d] > TK_MAP_MAX_BOX)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: TMA box[%d] is %lld (1 to %d)",
                            kernel, name, d, (long long)box[d], TK_MAP_MAX_BOX);
        if (t->shape[d] < 0 || (uint64_t)t->shape[d] > (1ull << 32))
            return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: shape[%d] is %lld (TMA: 0 to "
                            "2^32)", kernel, name, d, (long long)t->shape[d]);
        key->dims[i] = (uint64_t)t->shape[d];
        key->box[i] = (uint32_t)box[d];
    }
    int64_t inner_bytes = box[rank - 1] * size;
    if (inner_bytes % 16 != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: the TMA box's inner extent is %lld "
                        "bytes, not a multiple of 16", kernel, name, (long long)inner_bytes);
    if (swizzle_bytes != 0 && inner_bytes > swizzle_bytes)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: the TMA box's inner extent (%lld "
                        "bytes) exceeds the %d-byte swizzle span", kernel, name,
                        (long long)inner_bytes, swizzle_bytes);
    if (tk__tensor_empty(t))
        return TK_SUCCESS;
    if ((uintptr_t)t->data % 16 != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: data %p is not 16-byte aligned "
                        "(TMA)", kernel, name, t->data);
    if (t->shape[rank - 1] > 1 && t->strides[rank - 1] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: strides[%d] is %lld; TMA needs "
                        "the last dimension contiguous", kernel, name, rank - 1,
                        (long long)t->strides[rank - 1]);
    /* a dimension of size 1 is never stepped along: any legal stride will
     * do, so it gets the one of a dense layout, rounded to 16 bytes */
    uint64_t dense = (uint64_t)t->shape[rank - 1] * (uint64_t)size;
    for (int i = 1; i < rank; i++) {
        int d = rank - 1 - i;
        int64_t stride = t->strides[d];
        uint64_t bytes;
        if (t->shape[d] == 1) {
            bytes = (dense + 15) / 16 * 16;
        } else {
            if (stride < 0 || (uint64_t)stride >= (1ull << 40) / (uint64_t)size ||
                (stride * size) % 16 != 0)
                return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: strides[%d] is %lld "
                                "elements; TMA needs a multiple of 16 bytes below 2^40",
                                kernel, name, d, (long long)stride);
            bytes = (uint64_t)stride * (uint64_t)size;
        }
        key->strides[i] = bytes;
        dense = bytes * (uint64_t)t->shape[d];
    }
    return TK_SUCCESS;
}

tk_status tk__tensor_map(const char *kernel, const char *name, const tk_tensor *tensor,
                         int rank, const int64_t *box, int swizzle_bytes, CUtensorMap *out)
{
    if (kernel == NULL) kernel = "?";
    if (name == NULL) name = "?";
    if (out == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: no place for the TMA descriptor",
                        kernel, name);
    tk__map_key key;
    CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    tk_status status =
        tk__map_check(kernel, name, tensor, rank, box, swizzle_bytes, &key, &type);
    if (status != TK_SUCCESS)
        return status;
    if (tk__tensor_empty(tensor)) {
        memset(out, 0, sizeof *out);
        return TK_SUCCESS;
    }
    if (tk__map_lookup(&key, out))
        return TK_SUCCESS;

    const tk__driver_api *api;
    status = tk__driver(&api);
    if (status != TK_SUCCESS)
        return status;
    cuuint32_t box32[TK_MAP_MAX_RANK], element_strides[TK_MAP_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        box32[i] = key.box[i];
        element_strides[i] = 1;
    }
    CUresult result = api->cuTensorMapEncodeTiled(
        out, type, (cuuint32_t)rank, tensor->data, key.dims, key.strides + 1, box32,
        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, tk__map_swizzle(swizzle_bytes),
        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result != CUDA_SUCCESS)
        return tk__cuda_fail(TK_ERROR_INVALID_ARGUMENT, result,
                             "%s: %s: encoding its TMA descriptor", kernel, name);
    tk__map_store(&key, out);
    return TK_SUCCESS;
}
