/*
 * cublas.c -- cuBLASLt as tkbench's GEMM ceiling, through dlopen and the
 * handful of declarations below (no cuBLAS headers or libraries at build
 * time).  See cublas.h for the search order and the problem mapping.
 *
 * The declarations follow cublasLt.h of CUDA 13 (cublasLt.h, cublas_api.h,
 * library_types.h): every enum is an int, the opaque descriptors are
 * pointers, cublasLtMatmulAlgo_t is 64 bytes.  The library and its handle
 * live for the whole process; tkbench is single-threaded.
 */
#include "cublas.h"

#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the cuBLASLt declarations we use ---------------------------------- */

typedef int cublas_status;                 /* cublasStatus_t, 0 = success   */
typedef void *cublaslt_handle;             /* cublasLtHandle_t              */
typedef void *cublaslt_matmul_desc;        /* cublasLtMatmulDesc_t          */
typedef void *cublaslt_matrix_layout;      /* cublasLtMatrixLayout_t        */
typedef void *cublaslt_preference;         /* cublasLtMatmulPreference_t    */
typedef struct { uint64_t data[8]; } cublaslt_algo; /* cublasLtMatmulAlgo_t */
typedef struct {                           /* cublasLtMatmulHeuristicResult_t */
    cublaslt_algo algo;
    size_t workspace_size;
    cublas_status state;
    float waves_count;
    int reserved[4];
} cublaslt_heuristic;

enum {
    CUDA_DATA_R_32F = 0,      /* cudaDataType_t */
    CUDA_DATA_R_16BF = 14,
    CUDA_DATA_R_8F_E4M3 = 28,
    COMPUTE_32F = 68,         /* cublasComputeType_t CUBLAS_COMPUTE_32F */
    OP_N = 0, OP_T = 1,       /* cublasOperation_t */
    DESC_TRANSA = 3,          /* cublasLtMatmulDescAttributes_t */
    DESC_TRANSB = 4,
    DESC_A_SCALE_POINTER = 17,
    DESC_B_SCALE_POINTER = 18,
    PREF_MAX_WORKSPACE_BYTES = 1 /* cublasLtMatmulPreferenceAttributes_t */
};

#define WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct cublaslt_api {
    cublas_status (*create)(cublaslt_handle *);
    cublas_status (*desc_create)(cublaslt_matmul_desc *, int compute, int scale_type);
    cublas_status (*desc_destroy)(cublaslt_matmul_desc);
    cublas_status (*desc_set)(cublaslt_matmul_desc, int attribute, const void *, size_t);
    cublas_status (*layout_create)(cublaslt_matrix_layout *, int type, uint64_t rows,
                                   uint64_t cols, int64_t ld);
    cublas_status (*layout_destroy)(cublaslt_matrix_layout);
    cublas_status (*preference_create)(cublaslt_preference *);
    cublas_status (*preference_destroy)(cublaslt_preference);
    cublas_status (*preference_set)(cublaslt_preference, int attribute, const void *, size_t);
    cublas_status (*heuristic)(cublaslt_handle, cublaslt_matmul_desc, cublaslt_matrix_layout,
                               cublaslt_matrix_layout, cublaslt_matrix_layout,
                               cublaslt_matrix_layout, cublaslt_preference, int requested,
                               cublaslt_heuristic *results, int *returned);
    cublas_status (*matmul)(cublaslt_handle, cublaslt_matmul_desc, const void *alpha,
                            const void *a, cublaslt_matrix_layout, const void *b,
                            cublaslt_matrix_layout, const void *beta, const void *c,
                            cublaslt_matrix_layout, void *d, cublaslt_matrix_layout,
                            const cublaslt_algo *, void *workspace, size_t workspace_bytes,
                            void *stream);
} cublaslt_api;

/* The process-wide library: loaded once, kept open. */
static struct {
    bool tried, ok;
    char why[512];
    cublaslt_api api;
    cublaslt_handle handle;
} lib;

struct tkb_cublas_plan {
    const tk__driver_api *cu;
    cublaslt_matmul_desc desc;
    cublaslt_matrix_layout layout_a, layout_b, layout_d;
    cublaslt_algo algo;
    CUdeviceptr workspace;
    const void *a, *b;
    void *d;
};

/* ---- loading ------------------------------------------------------------- */

static void *open_first_match(const char *pattern, char *tried, size_t size) {
    glob_t found;
    if (glob(pattern, 0, NULL, &found) != 0)
        return NULL;
    void *handle = NULL;
    /* the newest version sorts last */
    for (size_t i = found.gl_pathc; i-- > 0 && !handle;) {
        handle = dlopen(found.gl_pathv[i], RTLD_NOW | RTLD_LOCAL);
        if (!handle)
            snprintf(tried, size, "%s", dlerror());
    }
    globfree(&found);
    return handle;
}

static void *open_library(void) {
    char detail[256] = "";
    const char *env = getenv("TK_CUBLASLT");
    if (env && *env) {
        void *handle = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (handle)
            return handle;
        snprintf(detail, sizeof detail, "%s", dlerror());
    }
    void *handle = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (handle)
        return handle;
    static const char *const roots[] = {
        "/usr/lib/python3*/dist-packages",       "/usr/lib/python3*/site-packages",
        "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
        "~/.local/lib/python3*/site-packages",   "~/.local/lib/python3*/dist-packages"};
    static const char *const leaves[] = {"nvidia/cublas/lib/libcublasLt.so.*",
                                         "nvidia/cu13/lib/libcublasLt.so.*"};
    const char *home = getenv("HOME");
    for (size_t r = 0; r < sizeof roots / sizeof roots[0]; r++)
        for (size_t l = 0; l < sizeof leaves / sizeof leaves[0]; l++) {
            char pattern[1024];
            const char *root = roots[r];
            if (root[0] == '~') {
                if (!home)
                    continue;
                snprintf(pattern, sizeof pattern, "%s%s/%s", home, root + 1, leaves[l]);
            } else {
                snprintf(pattern, sizeof pattern, "%s/%s", root, leaves[l]);
            }
            if ((handle = open_first_match(pattern, detail, sizeof detail)))
                return handle;
        }
    snprintf(lib.why, sizeof lib.why,
             "cuBLAS not found (TK_CUBLASLT, libcublasLt.so.13, Python site-packages "
             "nvidia/cublas and nvidia/cu13)%s%s",
             detail[0] ? ": " : "", detail);
    return NULL;
}

#define LOAD(field, symbol)                                                         \
    do {                                                                            \
        *(void **)&lib.api.field = dlsym(handle, symbol);                           \
        if (!lib.api.field) {                                                       \
            snprintf(lib.why, sizeof lib.why, "cuBLAS not found: %s is missing from " \
                     "the library", symbol);                                        \
            return false;                                                           \
        }                                                                           \
    } while (0)

static bool load(void) {
    void *handle = open_library();
    if (!handle)
        return false;
    LOAD(create, "cublasLtCreate");
    LOAD(desc_create, "cublasLtMatmulDescCreate");
    LOAD(desc_destroy, "cublasLtMatmulDescDestroy");
    LOAD(desc_set, "cublasLtMatmulDescSetAttribute");
    LOAD(layout_create, "cublasLtMatrixLayoutCreate");
    LOAD(layout_destroy, "cublasLtMatrixLayoutDestroy");
    LOAD(preference_create, "cublasLtMatmulPreferenceCreate");
    LOAD(preference_destroy, "cublasLtMatmulPreferenceDestroy");
    LOAD(preference_set, "cublasLtMatmulPreferenceSetAttribute");
    LOAD(heuristic, "cublasLtMatmulAlgoGetHeuristic");
    LOAD(matmul, "cublasLtMatmul");
    cublas_status status = lib.api.create(&lib.handle);
    if (status != 0) {
        snprintf(lib.why, sizeof lib.why, "cuBLAS not usable: cublasLtCreate returned %d",
                 status);
        return false;
    }
    return true;
}

bool tkb_cublas_available(char *why, size_t size) {
    if (!lib.tried) {
        lib.tried = true;
        lib.ok = load();
    }
    if (!lib.ok && why)
        snprintf(why, size, "%s", lib.why);
    return lib.ok;
}

/* ---- plans --------------------------------------------------------------- */

void tkb_cublas_plan_destroy(tkb_cublas_plan *plan) {
    if (!plan)
        return;
    if (plan->layout_a)
        lib.api.layout_destroy(plan->layout_a);
    if (plan->layout_b)
        lib.api.layout_destroy(plan->layout_b);
    if (plan->layout_d)
        lib.api.layout_destroy(plan->layout_d);
    if (plan->desc)
        lib.api.desc_destroy(plan->desc);
    if (plan->workspace)
        plan->cu->cuMemFree(plan->workspace);
    free(plan);
}

/* Records "what returned status" and fails the plan. */
static tkb_cublas_plan *plan_fail(tkb_cublas_plan *plan, const char *what, int status,
                                  char *why, size_t size) {
    snprintf(why, size, "cuBLAS: %s returned %d", what, status);
    tkb_cublas_plan_destroy(plan);
    return NULL;
}

tkb_cublas_plan *tkb_cublas_plan_create(const tk__driver_api *cu, tk_dtype input, int64_t m,
                                        int64_t n, int64_t k, CUdeviceptr a, CUdeviceptr b,
                                        CUdeviceptr d, CUdeviceptr scale_a,
                                        CUdeviceptr scale_b, char *why, size_t size) {
    if (!tkb_cublas_available(why, size))
        return NULL;
    if (input != TK_BF16 && input != TK_E4M3) {
        snprintf(why, size, "cuBLAS: no ceiling for %s inputs", tk__dtype_name(input));
        return NULL;
    }
    tkb_cublas_plan *plan = calloc(1, sizeof *plan);
    if (!plan) {
        snprintf(why, size, "out of host memory");
        return NULL;
    }
    plan->cu = cu;
    plan->a = (const void *)(uintptr_t)a;
    plan->b = (const void *)(uintptr_t)b;
    plan->d = (void *)(uintptr_t)d;
    int type = input == TK_BF16 ? CUDA_DATA_R_16BF : CUDA_DATA_R_8F_E4M3;
    int status;
    if ((status = lib.api.desc_create(&plan->desc, COMPUTE_32F, CUDA_DATA_R_32F)))
        return plan_fail(plan, "cublasLtMatmulDescCreate", status, why, size);
    /* column-major D^T (n x m) = op(B') * op(A') with B' = our b seen as
     * (k x n), transposed, and A' = our a seen as (k x m) */
    int32_t transpose = OP_T, keep = OP_N;
    if ((status = lib.api.desc_set(plan->desc, DESC_TRANSA, &transpose, sizeof transpose)) ||
        (status = lib.api.desc_set(plan->desc, DESC_TRANSB, &keep, sizeof keep)))
        return plan_fail(plan, "cublasLtMatmulDescSetAttribute(TRANS)", status, why, size);
    if (input == TK_E4M3) {
        /* cuBLAS's A is our b and its B our a */
        const void *scale_of_b = (const void *)(uintptr_t)scale_b;
        const void *scale_of_a = (const void *)(uintptr_t)scale_a;
        if ((status = lib.api.desc_set(plan->desc, DESC_A_SCALE_POINTER, &scale_of_b,
                                       sizeof scale_of_b)) ||
            (status = lib.api.desc_set(plan->desc, DESC_B_SCALE_POINTER, &scale_of_a,
                                       sizeof scale_of_a)))
            return plan_fail(plan, "cublasLtMatmulDescSetAttribute(SCALE)", status, why,
                             size);
    }
    if ((status = lib.api.layout_create(&plan->layout_a, type, (uint64_t)k, (uint64_t)n, k)) ||
        (status = lib.api.layout_create(&plan->layout_b, type, (uint64_t)k, (uint64_t)m, k)) ||
        (status = lib.api.layout_create(&plan->layout_d, CUDA_DATA_R_16BF, (uint64_t)n,
                                        (uint64_t)m, n)))
        return plan_fail(plan, "cublasLtMatrixLayoutCreate", status, why, size);
    CUresult result = cu->cuMemAlloc(&plan->workspace, WORKSPACE_BYTES);
    if (result != CUDA_SUCCESS) {
        plan->workspace = 0;
        return plan_fail(plan, "cuMemAlloc(workspace)", (int)result, why, size);
    }
    cublaslt_preference preference = NULL;
    uint64_t workspace_bytes = WORKSPACE_BYTES;
    cublaslt_heuristic heuristic;
    int returned = 0;
    memset(&heuristic, 0, sizeof heuristic);
    if ((status = lib.api.preference_create(&preference)))
        return plan_fail(plan, "cublasLtMatmulPreferenceCreate", status, why, size);
    status = lib.api.preference_set(preference, PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                    sizeof workspace_bytes);
    if (!status)
        status = lib.api.heuristic(lib.handle, plan->desc, plan->layout_a, plan->layout_b,
                                   plan->layout_d, plan->layout_d, preference, 1, &heuristic,
                                   &returned);
    lib.api.preference_destroy(preference);
    if (status)
        return plan_fail(plan, "cublasLtMatmulAlgoGetHeuristic", status, why, size);
    if (returned < 1)
        return plan_fail(plan, "cublasLtMatmulAlgoGetHeuristic (no algorithm)", 0, why, size);
    plan->algo = heuristic.algo;
    return plan;
}

tk_status tkb_cublas_plan_run(tkb_cublas_plan *plan) {
    float alpha = 1.0f, beta = 0.0f;
    int status = lib.api.matmul(lib.handle, plan->desc, &alpha, plan->b, plan->layout_a, plan->a,
                                plan->layout_b, &beta, plan->d, plan->layout_d, plan->d,
                                plan->layout_d, &plan->algo, (void *)(uintptr_t)plan->workspace,
                                WORKSPACE_BYTES, NULL);
    if (status != 0)
        return tk__fail(TK_ERROR_LAUNCH, "cublasLtMatmul returned %d", status);
    return TK_SUCCESS;
}
