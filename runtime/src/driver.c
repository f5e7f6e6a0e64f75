/*
 * driver.c -- finds the CUDA driver at run time and makes a context current.
 *
 * libtk never links libcuda: it dlopen()s libcuda.so.1 the first time a
 * kernel is launched (or tk_device_check() is called), so that programs
 * using libtk start, validate arguments and report TK_ERROR_NO_DEVICE on
 * machines without a driver, such as CI and the build machine.
 *
 * Entry points are resolved through cuGetProcAddress_v2 with an explicit
 * ABI version, which is how NVIDIA wants loaders to pick between the
 * versioned symbols (cuMemAlloc vs cuMemAlloc_v2, cuEventElapsedTime vs
 * _v2, ...).  Drivers older than CUDA 12 lack cuGetProcAddress_v2; for them
 * each entry falls back to dlsym of the symbol the CUDA 12 headers bind.
 *
 * Loading happens once per process (pthread_once) and its outcome, success
 * or failure, is remembered.  Making a context current happens on every
 * call, per thread: the caller's current context wins; a thread with none
 * gets the primary context of device 0, retained once for the process.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "tk_internal.h"

/* The ABI version asked of cuGetProcAddress: CUDA 12.0, the oldest driver
 * ABI whose signatures match every prototype in tk__driver_api. */
#define TK_DRIVER_ABI_VERSION 12000

/* One row per tk__driver_api member: the name cuGetProcAddress wants (no
 * version suffix) and the exported symbol for the dlsym fallback.  The
 * member names are macros in cuda.h (cuMemAlloc -> cuMemAlloc_v2), so the
 * offsets below go through the same macros as the struct and agree. */
static const struct {
    const char *name;
    const char *symbol;
    size_t offset;
    bool optional;  /* missing: the member stays NULL; its user reports */
} tk__driver_entries[] = {
#define TK_ENTRY(member, name, symbol) {name, symbol, offsetof(tk__driver_api, member), false}
#define TK_OPTIONAL(member, name, symbol) \
    {name, symbol, offsetof(tk__driver_api, member), true}
    TK_ENTRY(cuInit, "cuInit", "cuInit"),
    TK_ENTRY(cuDriverGetVersion, "cuDriverGetVersion", "cuDriverGetVersion"),
    TK_ENTRY(cuDeviceGet, "cuDeviceGet", "cuDeviceGet"),
    TK_ENTRY(cuDeviceGetCount, "cuDeviceGetCount", "cuDeviceGetCount"),
    TK_ENTRY(cuDeviceGetName, "cuDeviceGetName", "cuDeviceGetName"),
    TK_ENTRY(cuDeviceGetAttribute, "cuDeviceGetAttribute", "cuDeviceGetAttribute"),
    TK_ENTRY(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",
             "cuDevicePrimaryCtxRetain"),
    TK_ENTRY(cuCtxGetCurrent, "cuCtxGetCurrent", "cuCtxGetCurrent"),
    TK_ENTRY(cuCtxSetCurrent, "cuCtxSetCurrent", "cuCtxSetCurrent"),
    TK_ENTRY(cuCtxGetDevice, "cuCtxGetDevice", "cuCtxGetDevice"),
    TK_ENTRY(cuCtxSynchronize, "cuCtxSynchronize", "cuCtxSynchronize"),
    TK_ENTRY(cuModuleLoadData, "cuModuleLoadData", "cuModuleLoadData"),
    TK_ENTRY(cuModuleGetFunction, "cuModuleGetFunction", "cuModuleGetFunction"),
    TK_ENTRY(cuFuncSetAttribute, "cuFuncSetAttribute", "cuFuncSetAttribute"),
    TK_ENTRY(cuFuncGetAttribute, "cuFuncGetAttribute", "cuFuncGetAttribute"),
    TK_ENTRY(cuLaunchKernel, "cuLaunchKernel", "cuLaunchKernel"),
    TK_ENTRY(cuMemAlloc, "cuMemAlloc", "cuMemAlloc_v2"),
    TK_ENTRY(cuMemFree, "cuMemFree", "cuMemFree_v2"),
    TK_ENTRY(cuMemcpyHtoD, "cuMemcpyHtoD", "cuMemcpyHtoD_v2"),
    TK_ENTRY(cuMemcpyDtoH, "cuMemcpyDtoH", "cuMemcpyDtoH_v2"),
    TK_ENTRY(cuMemcpyDtoD, "cuMemcpyDtoD", "cuMemcpyDtoD_v2"),
    TK_ENTRY(cuMemsetD8, "cuMemsetD8", "cuMemsetD8_v2"),
    TK_ENTRY(cuMemsetD32, "cuMemsetD32", "cuMemsetD32_v2"),
    TK_ENTRY(cuEventCreate, "cuEventCreate", "cuEventCreate"),
    TK_ENTRY(cuEventRecord, "cuEventRecord", "cuEventRecord"),
    TK_ENTRY(cuEventSynchronize, "cuEventSynchronize", "cuEventSynchronize"),
    /* _v2 (CUDA 12.8) has the same signature; the ABI version picks one. */
    TK_ENTRY(cuEventElapsedTime, "cuEventElapsedTime", "cuEventElapsedTime"),
    TK_ENTRY(cuEventDestroy, "cuEventDestroy", "cuEventDestroy_v2"),
    TK_ENTRY(cuStreamSynchronize, "cuStreamSynchronize", "cuStreamSynchronize"),
    TK_ENTRY(cuGetErrorString, "cuGetErrorString", "cuGetErrorString"),
    TK_ENTRY(cuStreamCreate, "cuStreamCreate", "cuStreamCreate"),
    TK_ENTRY(cuStreamDestroy, "cuStreamDestroy", "cuStreamDestroy_v2"),
    TK_ENTRY(cuStreamBeginCapture, "cuStreamBeginCapture", "cuStreamBeginCapture_v2"),
    TK_ENTRY(cuStreamEndCapture, "cuStreamEndCapture", "cuStreamEndCapture"),
    TK_ENTRY(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags",
             "cuGraphInstantiateWithFlags"),
    TK_ENTRY(cuGraphLaunch, "cuGraphLaunch", "cuGraphLaunch"),
    TK_ENTRY(cuGraphExecDestroy, "cuGraphExecDestroy", "cuGraphExecDestroy"),
    TK_ENTRY(cuGraphDestroy, "cuGraphDestroy", "cuGraphDestroy"),
    TK_ENTRY(cuMemsetD8Async, "cuMemsetD8Async", "cuMemsetD8Async"),
    TK_ENTRY(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2"),
    TK_ENTRY(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel",
             "cuLaunchCooperativeKernel"),
    TK_ENTRY(cuOccupancyMaxActiveBlocksPerMultiprocessor,
             "cuOccupancyMaxActiveBlocksPerMultiprocessor",
             "cuOccupancyMaxActiveBlocksPerMultiprocessor"),
    TK_ENTRY(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", "cuTensorMapEncodeTiled"),
    /* only cluster launches need it (launch.c says so when it is missing) */
    TK_OPTIONAL(cuLaunchKernelEx, "cuLaunchKernelEx", "cuLaunchKernelEx"),
#undef TK_OPTIONAL
#undef TK_ENTRY
};
#define TK_DRIVER_ENTRY_COUNT \
    (sizeof tk__driver_entries / sizeof tk__driver_entries[0])

/* cuGetProcAddress_v2 as the CUDA 12+ driver exports it.  Declared here
 * rather than taken from cuda.h, whose macros rename it depending on the
 * default-stream mode of the includer. */
typedef CUresult (*tk__get_proc_address_fn)(const char *symbol, void **function,
                                            int cuda_version, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *status);

/* The outcome of the one-time load.  Written only inside pthread_once, read
 * after it: pthread_once orders the two, so no lock is needed. */
static pthread_once_t tk__driver_once = PTHREAD_ONCE_INIT;
static tk__driver_api tk__driver_table;
static tk_status tk__driver_status;
static char tk__driver_message[384];

/* Device 0's primary context, retained the first time a thread without a
 * current context calls in.  Never released: libtk's modules live in it
 * for the rest of the process. */
static pthread_mutex_t tk__primary_mutex = PTHREAD_MUTEX_INITIALIZER;
static CUcontext tk__primary_context;

static const char *tk__error_string(CUresult result)
{
    const char *text = NULL;
    if (tk__driver_table.cuGetErrorString == NULL ||
        tk__driver_table.cuGetErrorString(result, &text) != CUDA_SUCCESS ||
        text == NULL)
        return "unknown CUDA error";
    return text;
}

/* Records the load failure; the message is replayed on every later call. */
static void tk__driver_load_failed(tk_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tk__driver_load_failed(tk_status status, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(tk__driver_message, sizeof tk__driver_message, fmt, args);
    va_end(args);
    tk__driver_status = status;
}

/* cuInit results that mean "this machine has no usable GPU" rather than
 * "the driver misbehaved". */
static bool tk__means_no_device(CUresult result)
{
    switch (result) {
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
        return true;
    default:
        return false;
    }
}

static void tk__driver_load(void)
{
    /* The handle is kept for the life of the process: libtk may be called
     * until exit, and unloading a driver is never safe anyway. */
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *why = dlerror();
        tk__driver_load_failed(TK_ERROR_NO_DEVICE,
                               "CUDA driver not found (libcuda.so.1): %s",
                               why ? why : "dlopen failed");
        return;
    }

    tk__get_proc_address_fn get_proc_address =
        (tk__get_proc_address_fn)dlsym(library, "cuGetProcAddress_v2");
    for (size_t i = 0; i < TK_DRIVER_ENTRY_COUNT; i++) {
        void *function = NULL;
        if (get_proc_address != NULL) {
            CUdriverProcAddressQueryResult found;
            if (get_proc_address(tk__driver_entries[i].name, &function,
                                 TK_DRIVER_ABI_VERSION,
                                 CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                                 &found) != CUDA_SUCCESS ||
                found != CU_GET_PROC_ADDRESS_SUCCESS)
                function = NULL;
        }
        if (function == NULL)
            function = dlsym(library, tk__driver_entries[i].symbol);
        if (function == NULL && tk__driver_entries[i].optional)
            continue;
        if (function == NULL) {
            tk__driver_load_failed(TK_ERROR_DRIVER,
                                   "CUDA driver (libcuda.so.1) lacks %s; "
                                   "libtk needs a CUDA 12 or newer driver",
                                   tk__driver_entries[i].symbol);
            return;
        }
        /* Function pointers and void * share a representation on every
         * platform with dlsym; POSIX requires it. */
        *(void **)((char *)&tk__driver_table + tk__driver_entries[i].offset) =
            function;
    }

    CUresult result = tk__driver_table.cuInit(0);
    if (result != CUDA_SUCCESS) {
        if (result == CUDA_ERROR_NO_DEVICE)
            tk__driver_load_failed(TK_ERROR_NO_DEVICE, "no CUDA device");
        else
            tk__driver_load_failed(tk__means_no_device(result)
                                       ? TK_ERROR_NO_DEVICE
                                       : TK_ERROR_DRIVER,
                                   "cuInit failed: %s (CUresult %d)",
                                   tk__error_string(result), (int)result);
        return;
    }
    int devices = 0;
    result = tk__driver_table.cuDeviceGetCount(&devices);
    if (result != CUDA_SUCCESS) {
        tk__driver_load_failed(TK_ERROR_DRIVER,
                               "cuDeviceGetCount failed: %s (CUresult %d)",
                               tk__error_string(result), (int)result);
        return;
    }
    if (devices == 0) {
        tk__driver_load_failed(TK_ERROR_NO_DEVICE, "no CUDA device");
        return;
    }
    tk__driver_status = TK_SUCCESS;
}

tk_status tk__cuda_fail(tk_status status, CUresult result, const char *fmt,
                        ...)
{
    char what[256];
    va_list args;
    va_start(args, fmt);
    vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    return tk__fail(status, "%s: %s (CUresult %d)", what,
                    tk__error_string(result), (int)result);
}

/* Device 0's primary context, retained on first use. */
static tk_status tk__primary(CUcontext *context)
{
    tk_status status = TK_SUCCESS;
    pthread_mutex_lock(&tk__primary_mutex);
    if (tk__primary_context == NULL) {
        CUdevice device;
        CUresult result = tk__driver_table.cuDeviceGet(&device, 0);
        if (result == CUDA_SUCCESS)
            result = tk__driver_table.cuDevicePrimaryCtxRetain(
                &tk__primary_context, device);
        if (result != CUDA_SUCCESS) {
            tk__primary_context = NULL;
            status = tk__cuda_fail(TK_ERROR_DRIVER, result,
                                   "retaining the primary context of device 0");
        }
    }
    *context = tk__primary_context;
    pthread_mutex_unlock(&tk__primary_mutex);
    return status;
}

tk_status tk__driver(const tk__driver_api **api)
{
    pthread_once(&tk__driver_once, tk__driver_load);
    if (tk__driver_status != TK_SUCCESS)
        return tk__fail(tk__driver_status, "%s", tk__driver_message);

    /* Asked every time, not cached per thread: the application may switch
     * contexts between calls, and the query costs nanoseconds. */
    CUcontext context = NULL;
    CUresult result = tk__driver_table.cuCtxGetCurrent(&context);
    if (result != CUDA_SUCCESS)
        return tk__cuda_fail(TK_ERROR_DRIVER, result, "cuCtxGetCurrent");
    if (context == NULL) {
        tk_status status = tk__primary(&context);
        if (status != TK_SUCCESS)
            return status;
        result = tk__driver_table.cuCtxSetCurrent(context);
        if (result != CUDA_SUCCESS)
            return tk__cuda_fail(TK_ERROR_DRIVER, result,
                                 "making the primary context current");
    }
    if (api != NULL)
        *api = &tk__driver_table;
    return TK_SUCCESS;
}

tk_status tk_device_check(void)
{
    return tk__driver(NULL);
}
