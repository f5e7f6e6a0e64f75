/*
 * clock.c -- NVML through dlopen and the few declarations below (no NVML
 * header or library at build time); see clock.h for why tkbench reads
 * the clock.
 *
 * The declarations follow nvml.h: every function returns nvmlReturn_t
 * (an int, 0 = NVML_SUCCESS), nvmlDevice_t is an opaque pointer,
 * NVML_CLOCK_SM is 1, and the clock-event (formerly "throttle") reason
 * bits are SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20,
 * HwThermalSlowdown 0x40 and HwPowerBrakeSlowdown 0x80.  The device is
 * matched by PCI bus id (cuDeviceGetPCIBusId of the libcuda.so.1 libtk
 * already loaded), so CUDA_VISIBLE_DEVICES renumbering cannot pick the
 * wrong board; with no bus id, a machine with one GPU is still matched.
 */
#include "clock.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void *nvml_device; /* nvmlDevice_t */

enum {
    NVML_CLOCK_SM = 1,
    REASON_SW_POWER_CAP = 0x4,
    REASON_HW_SLOWDOWN = 0x8,
    REASON_SW_THERMAL = 0x20,
    REASON_HW_THERMAL = 0x40,
    REASON_HW_POWER_BRAKE = 0x80
};

typedef struct nvml_api {
    int (*init)(void);
    int (*count)(unsigned *);
    int (*by_index)(unsigned, nvml_device *);
    int (*by_bus_id)(const char *, nvml_device *);
    int (*clock)(nvml_device, int, unsigned *);
    int (*power)(nvml_device, unsigned *);
    int (*reasons)(nvml_device, unsigned long long *);
} nvml_api;

/* The process-wide state: opened once, read by tkb_clock_read. */
static struct {
    bool tried, open;
    nvml_api api;
    nvml_device device;
    char why[200];
} nvml;

/* The device's PCI bus id through the driver libtk loaded; false when the
 * driver does not export it. */
static bool bus_id_of(const tk__driver_api *cu, char *bus_id, int size) {
    CUdevice device = 0;
    if (!cu->cuCtxGetDevice || cu->cuCtxGetDevice(&device) != CUDA_SUCCESS)
        return false;
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!driver)
        return false;
    CUresult (*get_bus_id)(char *, int, CUdevice) = NULL;
    *(void **)&get_bus_id = dlsym(driver, "cuDeviceGetPCIBusId");
    bool ok = get_bus_id && get_bus_id(bus_id, size, device) == CUDA_SUCCESS;
    dlclose(driver);
    return ok;
}

/* Resolves the symbols and the device; fills nvml.why on failure. */
static bool open_nvml(const tk__driver_api *cu) {
    void *handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        snprintf(nvml.why, sizeof nvml.why, "NVML not found (%s)", dlerror());
        return false;
    }
    nvml_api *api = &nvml.api;
    *(void **)&api->init = dlsym(handle, "nvmlInit_v2");
    *(void **)&api->count = dlsym(handle, "nvmlDeviceGetCount_v2");
    *(void **)&api->by_index = dlsym(handle, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&api->by_bus_id = dlsym(handle, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&api->clock = dlsym(handle, "nvmlDeviceGetClockInfo");
    *(void **)&api->power = dlsym(handle, "nvmlDeviceGetPowerUsage");
    /* the newer name first; the older one is still exported (deprecated) */
    *(void **)&api->reasons = dlsym(handle, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!api->reasons)
        *(void **)&api->reasons = dlsym(handle, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if (!api->init || !api->clock || (!api->by_bus_id && !api->by_index)) {
        snprintf(nvml.why, sizeof nvml.why, "NVML lacks nvmlInit_v2, nvmlDeviceGetClockInfo "
                 "or a device lookup");
        return false;
    }
    int status = api->init();
    if (status != 0) {
        snprintf(nvml.why, sizeof nvml.why, "nvmlInit_v2 returned %d", status);
        return false;
    }
    char bus_id[32] = "";
    if (api->by_bus_id && bus_id_of(cu, bus_id, (int)sizeof bus_id) &&
        api->by_bus_id(bus_id, &nvml.device) == 0)
        return true;
    unsigned devices = 0;
    if (api->count && api->by_index && api->count(&devices) == 0 && devices == 1 &&
        api->by_index(0, &nvml.device) == 0)
        return true;
    snprintf(nvml.why, sizeof nvml.why, "NVML does not know the device (bus id \"%s\", %u "
             "NVML devices)", bus_id, devices);
    return false;
}

bool tkb_clock_open(const tk__driver_api *cu, char *why, size_t size) {
    if (!nvml.tried) {
        nvml.tried = true;
        nvml.open = open_nvml(cu);
    }
    if (!nvml.open)
        snprintf(why, size, "%s", nvml.why);
    return nvml.open;
}

bool tkb_clock_read(tkb_clock_sample *sample) {
    memset(sample, 0, sizeof *sample);
    sample->limit = "";
    if (!nvml.open || nvml.api.clock(nvml.device, NVML_CLOCK_SM, &sample->sm_mhz) != 0)
        return false;
    if (nvml.api.power && nvml.api.power(nvml.device, &sample->power_mw) != 0)
        sample->power_mw = 0;
    unsigned long long reasons = 0;
    if (nvml.api.reasons && nvml.api.reasons(nvml.device, &reasons) == 0) {
        if (reasons & (REASON_SW_POWER_CAP | REASON_HW_POWER_BRAKE))
            sample->limit = "power";
        else if (reasons & (REASON_SW_THERMAL | REASON_HW_THERMAL))
            sample->limit = "thermal";
        else if (reasons & REASON_HW_SLOWDOWN)
            sample->limit = "slowdown";
    }
    return true;
}
