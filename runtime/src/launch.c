/*
 * launch.c -- loads the embedded cubin and launches its kernels.
 *
 * The generated launchers (tk_kernels.h) validate their arguments and then
 * call tk__launch() with the PTX entry name, or tk__launch_cluster() for a
 * kernel compiled for clusters (.reqnctapercluster), which goes through
 * cuLaunchKernelEx with the cluster dimension attribute.  The first launch in a context
 * loads the cubin into it (a module lives in one context, and an
 * application may use several); every kernel's CUfunction is then cached
 * per (context, name) in an open-addressing hash table, so later launches
 * cost one lookup.  One mutex guards both caches: lookups are short, and the
 * launch itself happens outside the lock.
 *
 * Modules and cache entries are kept until the process exits.  An
 * application that destroys a context libtk has used must not expect the
 * kernels to follow it into a new one with the same handle (see
 * docs/runtime.md, "Threads and contexts").
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"

/* Above this, dynamic shared memory must be enabled per function with
 * CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (CUDA programming guide,
 * "Shared memory": the default limit is 48 KiB on every architecture). */
#define TK_DEFAULT_SHARED_LIMIT (48 * 1024)

/* Contexts one process uses: in practice one per GPU. */
#define TK_MAX_CONTEXTS 64

typedef struct tk__module_entry {
    CUcontext context;
    CUmodule module;
} tk__module_entry;

typedef struct tk__function_entry {
    CUcontext context;       /* NULL marks an empty slot */
    char *name;              /* owned copy of the PTX entry name */
    CUfunction function;
    uint32_t shared_limit;   /* dynamic shared bytes the function allows */
} tk__function_entry;

static pthread_mutex_t tk__launch_mutex = PTHREAD_MUTEX_INITIALIZER;
static tk__module_entry tk__modules[TK_MAX_CONTEXTS];
static int tk__module_count;
static tk__function_entry *tk__functions; /* power-of-two capacity */
static size_t tk__function_capacity, tk__function_count;

/* FNV-1a over the name, mixed with the context handle. */
static size_t tk__hash(CUcontext context, const char *name)
{
    uint64_t hash = 1469598103934665603ull ^ (uint64_t)(uintptr_t)context;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        hash = (hash ^ *c) * 1099511628211ull;
    return (size_t)(hash ^ (hash >> 29));
}

static tk__function_entry *tk__find_slot(tk__function_entry *table,
                                         size_t capacity, CUcontext context,
                                         const char *name)
{
    size_t mask = capacity - 1;
    for (size_t i = tk__hash(context, name) & mask;; i = (i + 1) & mask) {
        tk__function_entry *entry = &table[i];
        if (entry->context == NULL ||
            (entry->context == context && strcmp(entry->name, name) == 0))
            return entry;
    }
}

/* Keeps the table at most half full, so probes stay short and a free slot
 * always exists.  False when out of memory. */
static bool tk__reserve_function_slot(void)
{
    if (2 * (tk__function_count + 1) <= tk__function_capacity)
        return true;
    size_t capacity = tk__function_capacity ? 2 * tk__function_capacity : 128;
    tk__function_entry *table = calloc(capacity, sizeof *table);
    if (table == NULL)
        return false;
    for (size_t i = 0; i < tk__function_capacity; i++) {
        tk__function_entry *old = &tk__functions[i];
        if (old->context != NULL)
            *tk__find_slot(table, capacity, old->context, old->name) = *old;
    }
    free(tk__functions);
    tk__functions = table;
    tk__function_capacity = capacity;
    return true;
}

/* The module of the embedded cubin in `context`, loaded on first use.
 * Called with the mutex held. */
static tk_status tk__module(const tk__driver_api *api, CUcontext context,
                            CUmodule *module)
{
    for (int i = 0; i < tk__module_count; i++) {
        if (tk__modules[i].context == context) {
            *module = tk__modules[i].module;
            return TK_SUCCESS;
        }
    }
    if (tk__module_count == TK_MAX_CONTEXTS)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "libtk supports at most %d CUDA contexts per process",
                        TK_MAX_CONTEXTS);
    if (tk__cubin_size == 0)
        return tk__fail(TK_ERROR_DRIVER, "the embedded kernel library is empty");
    CUresult result = api->cuModuleLoadData(module, tk__cubin);
    if (result == CUDA_ERROR_NO_BINARY_FOR_GPU ||
        result == CUDA_ERROR_INVALID_IMAGE)
        return tk__cuda_fail(TK_ERROR_UNSUPPORTED, result,
                             "loading the kernel library (built for sm_90a) "
                             "on this GPU");
    if (result != CUDA_SUCCESS)
        return tk__cuda_fail(TK_ERROR_DRIVER, result,
                             "loading the kernel library");
    tk__modules[tk__module_count].context = context;
    tk__modules[tk__module_count].module = *module;
    tk__module_count++;
    return TK_SUCCESS;
}

/* Finds or creates the cache entry of `name` in `context` and makes sure
 * it allows shared_bytes of dynamic shared memory.  Called with the mutex
 * held. */
static tk_status tk__function(const tk__driver_api *api, CUcontext context,
                              const char *name, uint32_t shared_bytes,
                              CUfunction *function)
{
    if (!tk__reserve_function_slot())
        return tk__fail(TK_ERROR_DRIVER, "out of host memory");
    tk__function_entry *entry = tk__find_slot(
        tk__functions, tk__function_capacity, context, name);
    if (entry->context == NULL) {
        CUmodule module;
        tk_status status = tk__module(api, context, &module);
        if (status != TK_SUCCESS)
            return status;
        CUfunction found;
        CUresult result = api->cuModuleGetFunction(&found, module, name);
        if (result != CUDA_SUCCESS)
            return tk__cuda_fail(TK_ERROR_DRIVER, result,
                                 "kernel '%s' of the embedded library", name);
        char *copy = strdup(name);
        if (copy == NULL)
            return tk__fail(TK_ERROR_DRIVER, "out of host memory");
        entry->context = context;
        entry->name = copy;
        entry->function = found;
        entry->shared_limit = TK_DEFAULT_SHARED_LIMIT;
        tk__function_count++;
    }
    if (shared_bytes > entry->shared_limit) {
        CUresult result = api->cuFuncSetAttribute(
            entry->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            (int)shared_bytes);
        if (result != CUDA_SUCCESS)
            return tk__cuda_fail(TK_ERROR_LAUNCH, result,
                                 "kernel '%s': allowing %u bytes of dynamic "
                                 "shared memory",
                                 name, (unsigned)shared_bytes);
        entry->shared_limit = shared_bytes;
    }
    *function = entry->function;
    return TK_SUCCESS;
}

/* The driver and the cached function of `name` in the current context,
 * allowing shared_bytes of dynamic shared memory. */
static tk_status tk__prepare(const char *name, uint32_t shared_bytes,
                             const tk__driver_api **api, CUfunction *function)
{
    tk_status status = tk__driver(api);
    if (status != TK_SUCCESS)
        return status;
    CUcontext context;
    CUresult result = (*api)->cuCtxGetCurrent(&context);
    if (result != CUDA_SUCCESS)
        return tk__cuda_fail(TK_ERROR_DRIVER, result, "cuCtxGetCurrent");
    pthread_mutex_lock(&tk__launch_mutex);
    status = tk__function(*api, context, name, shared_bytes, function);
    pthread_mutex_unlock(&tk__launch_mutex);
    return status;
}

tk_status tk__launch_cluster(const char *name, const uint32_t grid[3],
                             const uint32_t cluster[3], uint32_t threads,
                             uint32_t shared_bytes, void **params, tk_stream stream)
{
    /* Launchers are generated, so these are libtk bugs; still no crash. */
    if (name == NULL || grid == NULL || cluster == NULL || threads == 0 ||
        shared_bytes > INT32_MAX)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "tk__launch_cluster: bad launch of '%s'",
                        name ? name : "(null)");
    for (int d = 0; d < 3; d++)
        if (cluster[d] == 0 || grid[d] % cluster[d] != 0)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "tk__launch_cluster: '%s': grid dimension %d (%u) is not a "
                            "multiple of the cluster's (%u)",
                            name, d, grid[d], cluster[d]);
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0)
        return TK_SUCCESS; /* an empty grid launches nothing */

    const tk__driver_api *api;
    CUfunction function = NULL;
    tk_status status = tk__prepare(name, shared_bytes, &api, &function);
    if (status != TK_SUCCESS)
        return status;
    if (api->cuLaunchKernelEx == NULL)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "kernel '%s' is launched in clusters, which needs "
                        "cuLaunchKernelEx; this CUDA driver does not have it "
                        "(CUDA 12 or newer does)", name);
    CUlaunchAttribute attribute;
    memset(&attribute, 0, sizeof attribute);
    attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attribute.value.clusterDim.x = cluster[0];
    attribute.value.clusterDim.y = cluster[1];
    attribute.value.clusterDim.z = cluster[2];
    CUlaunchConfig config;
    memset(&config, 0, sizeof config);
    config.gridDimX = grid[0];
    config.gridDimY = grid[1];
    config.gridDimZ = grid[2];
    config.blockDimX = threads;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = shared_bytes;
    config.hStream = (CUstream)stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    CUresult result = api->cuLaunchKernelEx(&config, function, params, NULL);
    if (result != CUDA_SUCCESS)
        return tk__cuda_fail(TK_ERROR_LAUNCH, result,
                             "launching '%s' (grid %u x %u x %u in clusters of "
                             "%u x %u x %u, %u threads, %u bytes of shared memory)",
                             name, grid[0], grid[1], grid[2], cluster[0], cluster[1],
                             cluster[2], threads, shared_bytes);
    return TK_SUCCESS;
}

tk_status tk__launch(const char *name, const uint32_t grid[3],
                     uint32_t threads, uint32_t shared_bytes, void **params,
                     tk_stream stream)
{
    /* Launchers are generated, so these are libtk bugs; still no crash. */
    if (name == NULL || grid == NULL || threads == 0 || shared_bytes > INT32_MAX)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "tk__launch: bad launch of '%s'",
                        name ? name : "(null)");
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0)
        return TK_SUCCESS; /* an empty grid launches nothing */

    const tk__driver_api *api;
    CUfunction function = NULL;
    tk_status status = tk__prepare(name, shared_bytes, &api, &function);
    if (status != TK_SUCCESS)
        return status;

    CUresult result = api->cuLaunchKernel(function, grid[0], grid[1], grid[2], threads,
                                 1, 1, shared_bytes, (CUstream)stream, params,
                                 NULL);
    if (result != CUDA_SUCCESS)
        return tk__cuda_fail(TK_ERROR_LAUNCH, result,
                             "launching '%s' (grid %u x %u x %u, %u threads, "
                             "%u bytes of shared memory)",
                             name, grid[0], grid[1], grid[2], threads,
                             shared_bytes);
    return TK_SUCCESS;
}
