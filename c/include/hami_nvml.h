/* This project's own declarations of the NVML subset it uses, with the real values and
 * layouts (checked against the real nvml.h by tests/sim/test_headers.py, built with
 * NVML_NO_UNVERSIONED_FUNC_DEFS so every versioned name is a plain declaration there).
 * Conformance mode (HAMI_NVML_CONFORMANCE, real nvml.h first) emits only the structs,
 * renamed hami_check_<name>. */
#ifndef HAMI_NVML_H
#define HAMI_NVML_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, VALUE[, TEXT]): the text is what nvmlErrorString returns. */
#define HAMI_NVML_RETURNS(X)                                                \
    X(NVML_SUCCESS, 0, "Success")                                           \
    X(NVML_ERROR_UNINITIALIZED, 1, "Uninitialized")                         \
    X(NVML_ERROR_INVALID_ARGUMENT, 2, "Invalid Argument")                   \
    X(NVML_ERROR_NOT_SUPPORTED, 3, "Not Supported")                         \
    X(NVML_ERROR_NO_PERMISSION, 4, "Insufficient Permissions")              \
    X(NVML_ERROR_ALREADY_INITIALIZED, 5, "Already Initialized")             \
    X(NVML_ERROR_NOT_FOUND, 6, "Not Found")                                 \
    X(NVML_ERROR_INSUFFICIENT_SIZE, 7, "Insufficient Size")                 \
    X(NVML_ERROR_INSUFFICIENT_POWER, 8, "Insufficient External Power")      \
    X(NVML_ERROR_DRIVER_NOT_LOADED, 9, "Driver Not Loaded")                 \
    X(NVML_ERROR_TIMEOUT, 10, "Timeout")                                    \
    X(NVML_ERROR_IRQ_ISSUE, 11, "Interrupt Request Issue")                  \
    X(NVML_ERROR_LIBRARY_NOT_FOUND, 12, "NVML Shared Library Not Found")    \
    X(NVML_ERROR_FUNCTION_NOT_FOUND, 13, "Function Not Found")              \
    X(NVML_ERROR_CORRUPTED_INFOROM, 14, "Corrupted infoROM")                \
    X(NVML_ERROR_GPU_IS_LOST, 15, "GPU is lost")                            \
    X(NVML_ERROR_RESET_REQUIRED, 16, "GPU requires restart")                \
    X(NVML_ERROR_OPERATING_SYSTEM, 17, "The operating system has blocked the request") \
    X(NVML_ERROR_LIB_RM_VERSION_MISMATCH, 18, "RM has detected an NVML/RM version mismatch") \
    X(NVML_ERROR_IN_USE, 19, "In use by another client")                    \
    X(NVML_ERROR_MEMORY, 20, "Insufficient Memory")                         \
    X(NVML_ERROR_NO_DATA, 21, "No data")                                    \
    X(NVML_ERROR_INSUFFICIENT_RESOURCES, 23, "Insufficient resources")      \
    X(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, 25, "Argument version mismatch") \
    X(NVML_ERROR_DEPRECATED, 26, "Deprecated")                              \
    X(NVML_ERROR_NOT_READY, 27, "Not ready")                                \
    X(NVML_ERROR_GPU_NOT_FOUND, 28, "GPU not found")                        \
    X(NVML_ERROR_INVALID_STATE, 29, "Invalid state")                        \
    X(NVML_ERROR_UNKNOWN, 999, "Unknown Error")

/* Plain #defines of nvml.h that this header repeats. */
#define HAMI_NVML_MACRO_VALUES(X)                        \
    X(NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, 32)            \
    X(NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE, 16)         \
    X(NVML_DEVICE_UUID_V2_BUFFER_SIZE, 96)               \
    X(NVML_DEVICE_NAME_V2_BUFFER_SIZE, 96)               \
    X(NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE, 80)        \
    X(NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE, 80)          \
    X(NVML_INIT_FLAG_NO_GPUS, 1)                         \
    X(NVML_INIT_FLAG_NO_ATTACH, 2)                       \
    X(nvmlEventTypeNone, 0)                              \
    X(nvmlEventTypeXidCriticalError, 8)                  \
    X(nvmlMemory_v2, (unsigned int)(40 | (2 << 24)))             \
    X(NVML_DEVICE_MIG_DISABLE, 0)                        \
    X(NVML_DEVICE_MIG_ENABLE, 1)                         \
    X(NVML_GPU_INSTANCE_PROFILE_1_SLICE, 0)              \
    X(NVML_GPU_INSTANCE_PROFILE_2_SLICE, 1)              \
    X(NVML_GPU_INSTANCE_PROFILE_3_SLICE, 2)              \
    X(NVML_GPU_INSTANCE_PROFILE_4_SLICE, 3)              \
    X(NVML_GPU_INSTANCE_PROFILE_7_SLICE, 4)              \
    X(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 7)         \
    X(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 9)         \
    X(NVML_GPU_INSTANCE_PROFILE_COUNT, 0x12)             \
    X(NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0)          \
    X(NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE, 4)          \
    X(NVML_COMPUTE_INSTANCE_PROFILE_COUNT, 9)            \
    X(NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, 0)    \
    X(nvmlGpuInstanceProfileInfo_v2, (unsigned int)(152 | (2 << 24))) \
    X(nvmlComputeInstanceProfileInfo_v2, (unsigned int)(136 | (2 << 24)))

#ifndef HAMI_NVML_CONFORMANCE
#define HAMI_NT(name) name

#define HAMI_NVML_ENUM_ITEM(name, value, ...) name = value,
typedef enum nvmlReturn_enum { HAMI_NVML_RETURNS(HAMI_NVML_ENUM_ITEM) } nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;
typedef enum nvmlIntNvLinkDeviceType_enum {
    NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
} nvmlIntNvLinkDeviceType_t;
typedef struct nvmlGpuFabricInfo_v3_st nvmlGpuFabricInfoV_t; /* only passed by pointer here */

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_INIT_FLAG_NO_GPUS 1
#define NVML_INIT_FLAG_NO_ATTACH 2
#define nvmlEventTypeNone 0x0000000000000000LL
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24U)))
#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_GPU_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 0x7
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 0x9
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12
#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0
#define nvmlGpuInstanceProfileInfo_v2 ((unsigned int)(sizeof(nvmlGpuInstanceProfileInfo_v2_t) | (2 << 24U)))
#define nvmlComputeInstanceProfileInfo_v2 ((unsigned int)(sizeof(nvmlComputeInstanceProfileInfo_v2_t) | (2 << 24U)))
#else
#define HAMI_NT(name) hami_check_##name
#endif

/* Structs, with the real layouts (one member per line: the conformance test reads them). */
typedef struct HAMI_NT(nvmlMemory_st) {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} HAMI_NT(nvmlMemory_t);

typedef struct HAMI_NT(nvmlMemory_v2_st) {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} HAMI_NT(nvmlMemory_v2_t);

typedef struct HAMI_NT(nvmlPciInfo_st) {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} HAMI_NT(nvmlPciInfo_t);

typedef struct HAMI_NT(nvmlUtilization_st) {
    unsigned int gpu;
    unsigned int memory;
} HAMI_NT(nvmlUtilization_t);

typedef struct HAMI_NT(nvmlProcessUtilizationSample_st) {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} HAMI_NT(nvmlProcessUtilizationSample_t);

typedef struct HAMI_NT(nvmlProcessInfo_v2_st) {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} HAMI_NT(nvmlProcessInfo_t);

/* The first process struct, of the unversioned nvmlDeviceGetComputeRunningProcesses. */
typedef struct HAMI_NT(nvmlProcessInfo_v1_st) {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} HAMI_NT(nvmlProcessInfo_v1_t);

typedef struct HAMI_NT(nvmlEventData_st) {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} HAMI_NT(nvmlEventData_t);

/* MIG. */
typedef struct HAMI_NT(nvmlGpuInstancePlacement_st) {
    unsigned int start;
    unsigned int size;
} HAMI_NT(nvmlGpuInstancePlacement_t);

typedef struct HAMI_NT(nvmlGpuInstanceProfileInfo_st) {
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
} HAMI_NT(nvmlGpuInstanceProfileInfo_t);

typedef struct HAMI_NT(nvmlGpuInstanceProfileInfo_v2_st) {
    unsigned int version;
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} HAMI_NT(nvmlGpuInstanceProfileInfo_v2_t);

typedef struct HAMI_NT(nvmlGpuInstanceInfo_st) {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    struct HAMI_NT(nvmlGpuInstancePlacement_st) placement;
} HAMI_NT(nvmlGpuInstanceInfo_t);

typedef struct HAMI_NT(nvmlComputeInstancePlacement_st) {
    unsigned int start;
    unsigned int size;
} HAMI_NT(nvmlComputeInstancePlacement_t);

typedef struct HAMI_NT(nvmlComputeInstanceProfileInfo_st) {
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
} HAMI_NT(nvmlComputeInstanceProfileInfo_t);

typedef struct HAMI_NT(nvmlComputeInstanceProfileInfo_v2_st) {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[96];
} HAMI_NT(nvmlComputeInstanceProfileInfo_v2_t);

typedef struct HAMI_NT(nvmlComputeInstanceInfo_st) {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
    struct HAMI_NT(nvmlComputeInstancePlacement_st) placement;
} HAMI_NT(nvmlComputeInstanceInfo_t);

/* The structs checked by the conformance test. */
#define HAMI_NVML_STRUCTS(X)                                                       \
    X(nvmlMemory_t) X(nvmlMemory_v2_t) X(nvmlPciInfo_t) X(nvmlUtilization_t)       \
    X(nvmlProcessUtilizationSample_t) X(nvmlProcessInfo_t) X(nvmlEventData_t)       \
    X(nvmlGpuInstancePlacement_t) X(nvmlGpuInstanceProfileInfo_t)                    \
    X(nvmlGpuInstanceProfileInfo_v2_t) X(nvmlGpuInstanceInfo_t)                      \
    X(nvmlComputeInstancePlacement_t) X(nvmlComputeInstanceProfileInfo_t)            \
    X(nvmlComputeInstanceProfileInfo_v2_t) X(nvmlComputeInstanceInfo_t)

/* Prototypes under the real exported names. One declaration per line. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length);
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion);
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType);
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo);
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor);
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization);
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization, unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos);
/* The unversioned entry points older clients (built with NVML_NO_UNVERSIONED_FUNC_DEFS, or
 * older binaries) look up, with their first structs. */
nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set);
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set);
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes);
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);
/* MIG. */
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus);
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info);
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements, unsigned int *count);
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId, unsigned int *count);
nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstance);
nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *gpuInstance);
nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance);
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstances, unsigned int *count);
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance);
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile, nvmlComputeInstanceProfileInfo_t *info);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile, nvmlComputeInstanceProfileInfo_v2_t *info);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance, unsigned int profileId, unsigned int *count);
nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstancePlacement_t *placements, unsigned int *count);
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t *computeInstance);
nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance, unsigned int profileId, const nvmlComputeInstancePlacement_t *placement, nvmlComputeInstance_t *computeInstance);
nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance);
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t *computeInstances, unsigned int *count);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id, nvmlComputeInstance_t *computeInstance);
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info);
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info);
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice);
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id);
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id);
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count);
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice);
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device);

#ifdef __cplusplus
}
#endif

#endif /* HAMI_NVML_H */
