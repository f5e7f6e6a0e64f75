/*
 * cublas.c -- cuBLASLt as tkbench's GEMM ceiling, through dlopen and the
 * handful of declarations below (no cuBLAS headers or libraries at build
 * time).  See cublas.h for the search order and the problem mapping.
 *
 * The declarations follow cublasLt.h and cublas_api.h of CUDA 13 (cuBLAS
 * 13.1, checked enum by enum): every enum is an int, the opaque
 * descriptors are pointers, cublasLtMatmulAlgo_t is 8 x uint64_t (64
 * bytes), and cublasLtMatmulHeuristicResult_t is that algo, a size_t
 * workspaceSize, a cublasStatus_t state, a float wavesCount and int
 * reserved[4].  The library and its handle live for the whole process;
 * tkbench is single-threaded.
 *
 * The ceiling must be the best cuBLAS can do, so a plan asks the
 * heuristic for up to CANDIDATES algorithms and times them (WARM_LAUNCHES
 * untimed each, then TIMED_LAUNCHES round-robin rounds, each launch after
 * an L2 flush between CUDA events, the median: the method of tkbench's
 * rows; round-robin so that the clock's fall under sustained load favours
 * no candidate), and keeps the fastest that runs; the heuristic's first choice alone was
 * 662 TFLOP/s at bf16 8192^3 where torch.matmul reached 806.  A
 * candidate that cublasLtMatmul refuses is reported with its status and
 * skipped, so "the heuristic returned it but the matmul will not run it"
 * can no longer drop the ceiling later.
 */
#define _GNU_SOURCE /* dladdr: which file the loader chose */
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

_Static_assert(sizeof(cublaslt_algo) == 64, "cublasLtMatmulAlgo_t is 64 bytes");
_Static_assert(sizeof(cublaslt_heuristic) == 64 + 8 + 4 + 4 + 16,
               "cublasLtMatmulHeuristicResult_t layout");

enum {
    CUDA_DATA_R_32F = 0,      /* cudaDataType_t (library_types.h) */
    CUDA_DATA_R_16BF = 14,
    CUDA_DATA_R_8F_E4M3 = 28,
    COMPUTE_32F = 68,         /* cublasComputeType_t CUBLAS_COMPUTE_32F */
    OP_N = 0, OP_T = 1,       /* cublasOperation_t */
    DESC_TRANSA = 3,          /* cublasLtMatmulDescAttributes_t */
    DESC_TRANSB = 4,
    DESC_A_SCALE_POINTER = 17,
    DESC_B_SCALE_POINTER = 18,
    DESC_FAST_ACCUM = 25,     /* int8_t */
    PREF_MAX_WORKSPACE_BYTES = 1, /* cublasLtMatmulPreferenceAttributes_t, uint64_t */
    LOG_OFF = 0, LOG_ERROR = 1    /* cublasLtLoggerSetLevel */
};

#define WORKSPACE_BYTES ((size_t)32 << 20)
#define CANDIDATES 16
#define WARM_LAUNCHES 3
#define TIMED_LAUNCHES 5
/* the plan's own copies of the two fp8 scales, each on its own 256 bytes */
#define SCALE_SLOT 256
/* choose_algorithm's answer when the device failed (not a cublasStatus_t) */
#define PLAN_BROKEN (-1)

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
    /* optional: diagnostics only */
    size_t (*version)(void);
    cublas_status (*log_level)(int);
    cublas_status (*log_file)(FILE *);
} cublaslt_api;

/* The process-wide library: loaded once, kept open. */
static struct {
    bool tried, ok;
    char why[512];
    char path[512];
    cublaslt_api api;
    cublaslt_handle handle;
} lib;

struct tkb_cublas_plan {
    const tk__driver_api *cu;
    tkb_flush *flush; /* NULL: candidates timed warm */
    cublaslt_matmul_desc desc;
    /* cuBLAS's A is our b (k x n column-major), its B our a (k x m), and
     * D^T (n x m) is our d; C is D (beta is 0), with D's layout */
    cublaslt_matrix_layout layout_a, layout_b, layout_d;
    cublaslt_algo algo;
    CUdeviceptr workspace, scales;
    const void *a, *b;
    void *d;
};

/* cublasStatus_t by name, for messages. */
static const char *status_name(int status) {
    switch (status) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cublasStatus_t";
    }
}

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

/* Search order (cublas.h): $TK_CUBLASLT, the loader's own search, the
 * CUDA toolkit and PyTorch venv of the GPU machine, then any CUDA toolkit,
 * virtual environment under /opt or Python site-packages with a cuBLAS
 * wheel.  Patterns starting with ~ are under $HOME. */
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
    static const char *const patterns[] = {
        "/usr/local/cuda/lib64/libcublasLt.so.13",
        "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13",
        "/usr/local/cuda*/lib64/libcublasLt.so.*",
        "/usr/local/cuda*/targets/*/lib/libcublasLt.so.*",
        "/opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib/libcublasLt.so.*",
        "/opt/*/.venv/lib/python3*/site-packages/nvidia/cublas/lib/libcublasLt.so.*",
        "/usr/lib/python3*/dist-packages/nvidia/cu13/lib/libcublasLt.so.*",
        "/usr/lib/python3*/dist-packages/nvidia/cublas/lib/libcublasLt.so.*",
        "/usr/lib/python3*/site-packages/nvidia/cu13/lib/libcublasLt.so.*",
        "/usr/lib/python3*/site-packages/nvidia/cublas/lib/libcublasLt.so.*",
        "/usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/libcublasLt.so.*",
        "/usr/local/lib/python3*/dist-packages/nvidia/cublas/lib/libcublasLt.so.*",
        "/usr/local/lib/python3*/site-packages/nvidia/cu13/lib/libcublasLt.so.*",
        "/usr/local/lib/python3*/site-packages/nvidia/cublas/lib/libcublasLt.so.*",
        "~/.local/lib/python3*/site-packages/nvidia/cu13/lib/libcublasLt.so.*",
        "~/.local/lib/python3*/site-packages/nvidia/cublas/lib/libcublasLt.so.*"};
    const char *home = getenv("HOME");
    for (size_t p = 0; p < sizeof patterns / sizeof patterns[0]; p++) {
        char pattern[1024];
        if (patterns[p][0] == '~') {
            if (!home)
                continue;
            snprintf(pattern, sizeof pattern, "%s%s", home, patterns[p] + 1);
        } else {
            snprintf(pattern, sizeof pattern, "%s", patterns[p]);
        }
        if ((handle = open_first_match(pattern, detail, sizeof detail)))
            return handle;
    }
    snprintf(lib.why, sizeof lib.why,
             "cuBLAS not found (TK_CUBLASLT, libcublasLt.so.13, /usr/local/cuda*/lib64, "
             "/opt/*/.venv and Python site-packages nvidia/cu13 and nvidia/cublas)%s%s",
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
    *(void **)&lib.api.version = dlsym(handle, "cublasLtGetVersion");
    *(void **)&lib.api.log_level = dlsym(handle, "cublasLtLoggerSetLevel");
    *(void **)&lib.api.log_file = dlsym(handle, "cublasLtLoggerSetFile");
    Dl_info info;
    snprintf(lib.path, sizeof lib.path, "%s",
             dladdr(*(void **)&lib.api.matmul, &info) && info.dli_fname ? info.dli_fname
                                                                         : "libcublasLt");
    cublas_status status = lib.api.create(&lib.handle);
    if (status != 0) {
        snprintf(lib.why, sizeof lib.why,
                 "cuBLAS not usable: %.400s: cublasLtCreate returned %d (%s)", lib.path, status,
                 status_name(status));
        return false;
    }
    fprintf(stderr, "tkbench: cuBLAS ceiling from %s (cublasLtGetVersion %zu)\n", lib.path,
            lib.api.version ? lib.api.version() : (size_t)0);
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
    if (plan->scales)
        plan->cu->cuMemFree(plan->scales);
    free(plan);
}

/* Records "stage returned status (name)" and fails the plan. */
static tkb_cublas_plan *plan_fail(tkb_cublas_plan *plan, const char *stage, int status,
                                  char *why, size_t size) {
    snprintf(why, size, "cuBLAS: %s returned %d (%s)", stage, status, status_name(status));
    tkb_cublas_plan_destroy(plan);
    return NULL;
}

/* Same for a driver call (its CUresult). */
static tkb_cublas_plan *plan_fail_driver(tkb_cublas_plan *plan, const char *stage,
                                         CUresult result, char *why, size_t size) {
    const char *text = NULL;
    if (plan->cu->cuGetErrorString(result, &text) != CUDA_SUCCESS || !text)
        text = "unknown";
    snprintf(why, size, "cuBLAS plan: %s returned CUresult %d (%s)", stage, (int)result, text);
    tkb_cublas_plan_destroy(plan);
    return NULL;
}

/* One cublasLtMatmul of the plan with algo, on the default stream. */
static cublas_status run_algo(const tkb_cublas_plan *plan, const cublaslt_algo *algo) {
    float alpha = 1.0f, beta = 0.0f;
    return lib.api.matmul(lib.handle, plan->desc, &alpha, plan->b, plan->layout_a, plan->a,
                          plan->layout_b, &beta, plan->d, plan->layout_d, plan->d,
                          plan->layout_d, algo, (void *)(uintptr_t)plan->workspace,
                          WORKSPACE_BYTES, NULL);
}

static int compare_floats(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* What timing the candidates needs: events and, when it can be had, the
 * L2 flush, the same read flush as tkbench's timed rows (bench/flush.c) so
 * that the algorithm is picked under the conditions it is timed in. */
typedef struct timer {
    const tk__driver_api *cu;
    CUevent start, stop;
    tkb_flush *flush; /* NULL: timed without flushing */
} timer;

/* Outcome of one launch of a candidate. */
typedef enum { CANDIDATE_RAN, CANDIDATE_REFUSED, CANDIDATE_BROKE } candidate_outcome;

/* One launch of algo; with ms, timed between the timer's events after an
 * L2 flush (pattern: the memset flush's fill), *ms its time.  REFUSED (with
 * *status) when cublasLtMatmul will not run it; BROKE when the device or
 * the driver failed, which ends the search. */
static candidate_outcome launch_candidate(const tkb_cublas_plan *plan, const timer *t,
                                          const cublaslt_algo *algo, unsigned pattern,
                                          float *ms, cublas_status *status,
                                          CUresult *result) {
    const tk__driver_api *cu = t->cu;
    *status = 0;
    *result = CUDA_SUCCESS;
    if (!ms)
        return (*status = run_algo(plan, algo)) != 0 ? CANDIDATE_REFUSED : CANDIDATE_RAN;
    if (t->flush && !tkb_flush_run(t->flush, pattern)) {
        *result = CUDA_ERROR_LAUNCH_FAILED;
        return CANDIDATE_BROKE;
    }
    if ((*result = cu->cuEventRecord(t->start, NULL)))
        return CANDIDATE_BROKE;
    if ((*status = run_algo(plan, algo)) != 0)
        return CANDIDATE_REFUSED;
    if ((*result = cu->cuEventRecord(t->stop, NULL)) ||
        (*result = cu->cuEventSynchronize(t->stop)) ||
        (*result = cu->cuEventElapsedTime(ms, t->start, t->stop)))
        return CANDIDATE_BROKE;
    return CANDIDATE_RAN;
}

/* Runs candidate 0 once more with cuBLASLt's error log on stderr, so that
 * the library says why it refuses the problem. */
static void explain_refusal(const tkb_cublas_plan *plan, const cublaslt_algo *algo) {
    if (!lib.api.log_level || !lib.api.log_file)
        return;
    fprintf(stderr, "tkbench: cuBLASLt's own reason (log level 1):\n");
    lib.api.log_file(stderr);
    lib.api.log_level(LOG_ERROR);
    run_algo(plan, algo);
    lib.api.log_level(LOG_OFF);
    fflush(stderr);
}

/* A candidate's standing in the race. */
typedef enum { CANDIDATE_SKIPPED, CANDIDATE_LIVE, CANDIDATE_OUT } candidate_state;

/* Times the usable candidates and keeps the fastest in plan->algo: each
 * gets WARM_LAUNCHES untimed launches, then TIMED_LAUNCHES rounds time
 * every live candidate once per round, and the median of its rounds
 * ranks it.  Round-robin because the clock falls under sustained load:
 * timed one after the other, the early candidates would run at higher
 * clocks than the late ones.  Returns 0, the first refusal's status when
 * cuBLAS refuses them all, 15 (NOT_SUPPORTED) when none is usable, or
 * PLAN_BROKEN; why says which. */
static int race_candidates(tkb_cublas_plan *plan, const timer *t,
                           const cublaslt_heuristic *found, int returned, const char *label,
                           char *why, size_t size) {
    candidate_state state[CANDIDATES];
    float times[CANDIDATES][TIMED_LAUNCHES];
    int first_refusal = 0, first_refused = -1, refused = 0, live = 0;
    CUresult result = CUDA_SUCCESS;
    for (int i = 0; i < returned; i++) {
        state[i] = CANDIDATE_LIVE;
        if (found[i].state != 0 || found[i].workspace_size > WORKSPACE_BYTES) {
            fprintf(stderr, "tkbench: %s: candidate %d of %d skipped (state %d, workspace %zu)\n",
                    label, i, returned, found[i].state, found[i].workspace_size);
            state[i] = CANDIDATE_SKIPPED;
        }
    }
    /* launch -1 is the warm-up of every candidate, then the timed rounds */
    for (int round = -1; round < TIMED_LAUNCHES; round++)
        for (int i = 0; i < returned; i++) {
            if (state[i] != CANDIDATE_LIVE)
                continue;
            cublas_status refusal = 0;
            candidate_outcome outcome = CANDIDATE_RAN;
            for (int w = 0; round < 0 && w < WARM_LAUNCHES && outcome == CANDIDATE_RAN; w++)
                outcome = launch_candidate(plan, t, &found[i].algo, 0, NULL, &refusal, &result);
            if (round < 0 && outcome == CANDIDATE_RAN &&
                (result = t->cu->cuCtxSynchronize()) != CUDA_SUCCESS)
                outcome = CANDIDATE_BROKE;
            if (round >= 0)
                outcome = launch_candidate(plan, t, &found[i].algo,
                                           (unsigned)(round * CANDIDATES + i), &times[i][round],
                                           &refusal, &result);
            if (outcome == CANDIDATE_BROKE) {
                snprintf(why, size, "cuBLAS plan: candidate %d of %d broke the device: "
                         "CUresult %d", i, returned, (int)result);
                return PLAN_BROKEN;
            }
            if (outcome == CANDIDATE_REFUSED) {
                fprintf(stderr, "tkbench: %s: candidate %d of %d: cublasLtMatmul returned %d "
                        "(%s)\n", label, i, returned, refusal, status_name(refusal));
                if (refused++ == 0)
                    first_refusal = refusal, first_refused = i;
                state[i] = CANDIDATE_OUT;
            }
        }
    int best = -1;
    float best_ms = 0, first_ms = -1;
    for (int i = 0; i < returned; i++) {
        if (state[i] != CANDIDATE_LIVE)
            continue;
        live++;
        qsort(times[i], TIMED_LAUNCHES, sizeof times[i][0], compare_floats);
        float ms = times[i][TIMED_LAUNCHES / 2];
        if (i == 0)
            first_ms = ms;
        if (best < 0 || ms < best_ms)
            best = i, best_ms = ms;
    }
    if (best >= 0) {
        plan->algo = found[best].algo;
        char first[48] = "did not run";
        if (first_ms >= 0)
            snprintf(first, sizeof first, "%.4f ms", first_ms);
        fprintf(stderr, "tkbench: %s: cuBLAS algorithm %d of %d wins, %.4f ms median of %d "
                "round-robin rounds over %d candidates at plan time (the heuristic's first: "
                "%s; %d refused)\n",
                label, best, returned, best_ms, TIMED_LAUNCHES, live, first, refused);
        return 0;
    }
    if (refused) {
        snprintf(why, size, "cuBLAS: cublasLtMatmul refused all %d heuristic algorithms (first "
                 "refusal, candidate %d: %d, %s)", returned, first_refused, first_refusal,
                 status_name(first_refusal));
        explain_refusal(plan, &found[first_refused].algo);
        return first_refusal;
    }
    snprintf(why, size, "cuBLAS: none of the %d heuristic algorithms is usable (bad state "
             "or workspace above %zu bytes)", returned, WORKSPACE_BYTES);
    return 15;
}

/* Asks the heuristic for up to CANDIDATES algorithms, races them
 * (race_candidates) and keeps the fastest in plan->algo.  Returns 0 on success; otherwise the
 * failing cublasStatus_t (or PLAN_BROKEN) with the stage in why.  label
 * names the problem in the stderr notes. */
static int choose_algorithm(tkb_cublas_plan *plan, const char *label, char *why, size_t size) {
    const tk__driver_api *cu = plan->cu;
    cublaslt_preference preference = NULL;
    uint64_t workspace_bytes = WORKSPACE_BYTES;
    cublaslt_heuristic found[CANDIDATES];
    int returned = 0;
    memset(found, 0, sizeof found);
    int status = lib.api.preference_create(&preference);
    if (status) {
        snprintf(why, size, "cuBLAS: cublasLtMatmulPreferenceCreate returned %d (%s)", status,
                 status_name(status));
        return status;
    }
    status = lib.api.preference_set(preference, PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                    sizeof workspace_bytes);
    if (status) {
        lib.api.preference_destroy(preference);
        snprintf(why, size, "cuBLAS: cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES) "
                 "returned %d (%s)", status, status_name(status));
        return status;
    }
    /* C and D share D's layout: beta is 0 and the matmul passes d as both */
    status = lib.api.heuristic(lib.handle, plan->desc, plan->layout_a, plan->layout_b,
                               plan->layout_d, plan->layout_d, preference, CANDIDATES, found,
                               &returned);
    lib.api.preference_destroy(preference);
    if (status || returned < 1) {
        snprintf(why, size, "cuBLAS: cublasLtMatmulAlgoGetHeuristic returned %d (%s) with %d "
                 "algorithms", status, status_name(status), returned);
        return status ? status : 15;
    }
    timer t = {.cu = cu};
    CUresult result;
    if ((result = cu->cuEventCreate(&t.start, CU_EVENT_DEFAULT)) ||
        (result = cu->cuEventCreate(&t.stop, CU_EVENT_DEFAULT))) {
        if (t.start)
            cu->cuEventDestroy(t.start);
        snprintf(why, size, "cuBLAS plan: cuEventCreate returned CUresult %d", (int)result);
        return PLAN_BROKEN;
    }
    t.flush = plan->flush;
    if (!t.flush)
        fprintf(stderr, "tkbench: %s: no L2 flush, candidates timed warm\n", label);
    status = race_candidates(plan, &t, found, returned, label, why, size);
    cu->cuEventDestroy(t.start);
    cu->cuEventDestroy(t.stop);
    return status;
}

/* The fp8 scales: the plan keeps its own copies, each 256-byte aligned
 * (the caller's two floats may sit 4 bytes apart, and cuBLASLt may check
 * scale pointers for alignment at matmul time, which the heuristic does
 * not), as cuBLAS's A scale (our b's) and B scale (our a's).  *ones says
 * whether both are exactly 1. */
static CUresult copy_scales(tkb_cublas_plan *plan, CUdeviceptr scale_a, CUdeviceptr scale_b,
                            bool *ones) {
    const tk__driver_api *cu = plan->cu;
    float values[2] = {0, 0};
    CUresult result = cu->cuMemAlloc(&plan->scales, 2 * SCALE_SLOT);
    if (result != CUDA_SUCCESS) {
        plan->scales = 0;
        return result;
    }
    if ((result = cu->cuMemcpyDtoD(plan->scales, scale_b, sizeof(float))) ||
        (result = cu->cuMemcpyDtoD(plan->scales + SCALE_SLOT, scale_a, sizeof(float))) ||
        (result = cu->cuMemcpyDtoH(&values[0], scale_b, sizeof(float))) ||
        (result = cu->cuMemcpyDtoH(&values[1], scale_a, sizeof(float))))
        return result;
    *ones = values[0] == 1.0f && values[1] == 1.0f;
    return CUDA_SUCCESS;
}

/* Sets (or, with NULL pointers, clears: cuBLAS then takes 1) the A and B
 * scale pointers of the descriptor. */
static int set_scales(tkb_cublas_plan *plan, CUdeviceptr of_a, CUdeviceptr of_b) {
    const void *a = (const void *)(uintptr_t)of_a, *b = (const void *)(uintptr_t)of_b;
    int status = lib.api.desc_set(plan->desc, DESC_A_SCALE_POINTER, &a, sizeof a);
    return status ? status : lib.api.desc_set(plan->desc, DESC_B_SCALE_POINTER, &b, sizeof b);
}

tkb_cublas_plan *tkb_cublas_plan_create(const tk__driver_api *cu, tkb_flush *flush,
                                        tk_dtype input, int64_t m, int64_t n, int64_t k, CUdeviceptr a, CUdeviceptr b,
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
    plan->flush = flush;
    plan->a = (const void *)(uintptr_t)a;
    plan->b = (const void *)(uintptr_t)b;
    plan->d = (void *)(uintptr_t)d;
    bool fp8 = input == TK_E4M3;
    char label[96];
    snprintf(label, sizeof label, "%s %ldx%ldx%ld", fp8 ? "e4m3" : "bf16", (long)m, (long)n,
             (long)k);
    int type = fp8 ? CUDA_DATA_R_8F_E4M3 : CUDA_DATA_R_16BF;
    int status;
    /* FP8 on Hopper: compute 32F, scale type 32F, TN, C of D's type (bf16) */
    if ((status = lib.api.desc_create(&plan->desc, COMPUTE_32F, CUDA_DATA_R_32F)))
        return plan_fail(plan, "cublasLtMatmulDescCreate", status, why, size);
    /* column-major D^T (n x m) = op(B') * op(A') with B' = our b seen as
     * (k x n), transposed, and A' = our a seen as (k x m): the "TN" form
     * FP8 requires */
    int32_t transpose = OP_T, keep = OP_N;
    if ((status = lib.api.desc_set(plan->desc, DESC_TRANSA, &transpose, sizeof transpose)))
        return plan_fail(plan, "cublasLtMatmulDescSetAttribute(TRANSA)", status, why, size);
    if ((status = lib.api.desc_set(plan->desc, DESC_TRANSB, &keep, sizeof keep)))
        return plan_fail(plan, "cublasLtMatmulDescSetAttribute(TRANSB)", status, why, size);
    bool unit_scales = false;
    if (fp8) {
        CUresult result = copy_scales(plan, scale_a, scale_b, &unit_scales);
        if (result != CUDA_SUCCESS)
            return plan_fail_driver(plan, "copying the fp8 scales", result, why, size);
        if ((status = set_scales(plan, plan->scales, plan->scales + SCALE_SLOT)))
            return plan_fail(plan, "cublasLtMatmulDescSetAttribute(A/B_SCALE_POINTER)", status,
                             why, size);
        /* torch._scaled_mm's default (use_fast_accum=False): the
         * accumulator is promoted periodically, as our kernel does */
        int8_t fast_accumulation = 0;
        if ((status = lib.api.desc_set(plan->desc, DESC_FAST_ACCUM, &fast_accumulation,
                                       sizeof fast_accumulation)))
            return plan_fail(plan, "cublasLtMatmulDescSetAttribute(FAST_ACCUM)", status, why,
                             size);
    }
    if ((status = lib.api.layout_create(&plan->layout_a, type, (uint64_t)k, (uint64_t)n, k)))
        return plan_fail(plan, "cublasLtMatrixLayoutCreate(A)", status, why, size);
    if ((status = lib.api.layout_create(&plan->layout_b, type, (uint64_t)k, (uint64_t)m, k)))
        return plan_fail(plan, "cublasLtMatrixLayoutCreate(B)", status, why, size);
    if ((status = lib.api.layout_create(&plan->layout_d, CUDA_DATA_R_16BF, (uint64_t)n,
                                        (uint64_t)m, n)))
        return plan_fail(plan, "cublasLtMatrixLayoutCreate(C/D)", status, why, size);
    CUresult result = cu->cuMemAlloc(&plan->workspace, WORKSPACE_BYTES);
    if (result != CUDA_SUCCESS) {
        plan->workspace = 0;
        return plan_fail_driver(plan, "cuMemAlloc(workspace)", result, why, size);
    }
    /* with unit scales a refusal of the scale pointers can still be
     * worked around: the matmul without them computes the same product */
    status = choose_algorithm(plan, label, why, size);
    if (status && status != PLAN_BROKEN && fp8 && unit_scales) {
        fprintf(stderr, "tkbench: %s: %s; retrying without scale pointers (both scales are 1)\n",
                label, why);
        if ((status = set_scales(plan, 0, 0)))
            return plan_fail(plan, "cublasLtMatmulDescSetAttribute(clearing the scales)",
                             status, why, size);
        status = choose_algorithm(plan, label, why, size);
    }
    if (status) {
        tkb_cublas_plan_destroy(plan);
        return NULL;
    }
    return plan;
}

tk_status tkb_cublas_plan_run(tkb_cublas_plan *plan) {
    int status = run_algo(plan, &plan->algo);
    if (status != 0)
        return tk__fail(TK_ERROR_LAUNCH, "cublasLtMatmul returned %d (%s)", status,
                        status_name(status));
    return TK_SUCCESS;
}
