/* This project's own declarations of the CUDA driver API subset it uses: types, enums and
 * error codes with the real numeric values, structs with the real layouts. Nothing here needs
 * the CUDA toolkit. tests/sim/test_headers.py proves every constant, struct layout and
 * prototype equal to the real cuda.h wherever one is installed.
 *
 * Constants live in X-macro lists (hami_cuda_consts.h) so the conformance check can assert
 * each one against the real header. Prototypes live in hami_cuda_api.h under the real
 * exported symbol names (cuMemAlloc_v2, cuCtxCreate_v4...); hami_cuda_procs.h maps API names
 * and requested versions to those symbols.
 *
 * Conformance mode (HAMI_CUDA_CONFORMANCE defined, real cuda.h included first): only the
 * structs are emitted, renamed hami_check_<name>, so their layout can be compared.
 */
#ifndef HAMI_CUDA_H
#define HAMI_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "hami_cuda_consts.h"

#ifndef HAMI_CUDA_CONFORMANCE
#define HAMI_T(name) name

#define HAMI_CUDA_VERSION 13000

typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

typedef unsigned long long CUdeviceptr_v2;
typedef CUdeviceptr_v2 CUdeviceptr;
typedef int CUdevice_v1;
typedef CUdevice_v1 CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef struct CUgraphEdgeData_st CUgraphEdgeData; /* only passed by pointer here */
typedef unsigned long long CUmemGenericAllocationHandle_v1;
typedef CUmemGenericAllocationHandle_v1 CUmemGenericAllocationHandle;

#define HAMI_ENUM_ITEM(name, value, ...) name = value,

typedef enum cudaError_enum { HAMI_CU_RESULTS(HAMI_ENUM_ITEM) } CUresult;
typedef enum CUdevice_attribute_enum { HAMI_CU_DEVICE_ATTRIBUTES(HAMI_ENUM_ITEM) } CUdevice_attribute;
typedef enum CUarray_format_enum { HAMI_CU_ARRAY_FORMATS(HAMI_ENUM_ITEM) } CUarray_format;
typedef enum CUmemPool_attribute_enum { HAMI_CU_MEMPOOL_ATTRIBUTES(HAMI_ENUM_ITEM) } CUmemPool_attribute;
typedef enum CUgraphMem_attribute_enum { HAMI_CU_GRAPH_MEM_ATTRIBUTES(HAMI_ENUM_ITEM) } CUgraphMem_attribute;
typedef enum CUmemLocationType_enum { HAMI_CU_MEM_LOCATION_TYPES(HAMI_ENUM_ITEM) } CUmemLocationType;
typedef enum CUmemAllocationType_enum { HAMI_CU_MEM_ALLOCATION_TYPES(HAMI_ENUM_ITEM) } CUmemAllocationType;
typedef enum CUmemAllocationHandleType_enum {
    HAMI_CU_MEM_HANDLE_TYPES(HAMI_ENUM_ITEM)
} CUmemAllocationHandleType;
typedef enum CUmemAccess_flags_enum { HAMI_CU_MEM_ACCESS_FLAGS(HAMI_ENUM_ITEM) } CUmemAccess_flags;
typedef enum CUipcMem_flags_enum { HAMI_CU_IPC_MEM_FLAGS(HAMI_ENUM_ITEM) } CUipcMem_flags;
typedef enum CUmemAllocationGranularity_flags_enum {
    HAMI_CU_MEM_GRANULARITY_FLAGS(HAMI_ENUM_ITEM)
} CUmemAllocationGranularity_flags;
typedef enum CUstreamCaptureStatus_enum { HAMI_CU_CAPTURE_STATUSES(HAMI_ENUM_ITEM) } CUstreamCaptureStatus;
typedef enum CUstreamCaptureMode_enum { HAMI_CU_CAPTURE_MODES(HAMI_ENUM_ITEM) } CUstreamCaptureMode;
typedef enum CUdriverProcAddress_flags_enum {
    HAMI_CU_PROC_ADDRESS_FLAGS(HAMI_ENUM_ITEM)
} CUdriverProcAddress_flags;
typedef enum CUdriverProcAddressQueryResult_enum {
    HAMI_CU_PROC_ADDRESS_RESULTS(HAMI_ENUM_ITEM)
} CUdriverProcAddressQueryResult;
typedef enum CUlaunchAttributeID_enum { HAMI_CU_LAUNCH_ATTRIBUTES(HAMI_ENUM_ITEM) } CUlaunchAttributeID;
typedef enum CUexecAffinityType_enum { HAMI_CU_EXEC_AFFINITY_TYPES(HAMI_ENUM_ITEM) } CUexecAffinityType;
typedef enum CUcigDataType_enum { HAMI_CU_CIG_DATA_TYPES(HAMI_ENUM_ITEM) } CUcigDataType;
typedef enum CUjit_option_enum { HAMI_CU_JIT_OPTIONS(HAMI_ENUM_ITEM) } CUjit_option;
typedef enum CUlibraryOption_enum { HAMI_CU_LIBRARY_OPTIONS(HAMI_ENUM_ITEM) } CUlibraryOption;
typedef enum CUevent_flags_enum { HAMI_CU_EVENT_FLAGS(HAMI_ENUM_ITEM) } CUevent_flags;
typedef enum CUstream_flags_enum { HAMI_CU_STREAM_FLAGS(HAMI_ENUM_ITEM) } CUstream_flags;
typedef enum CUmemAttach_flags_enum { HAMI_CU_MEM_ATTACH_FLAGS(HAMI_ENUM_ITEM) } CUmemAttach_flags;
typedef enum CUfunction_attribute_enum {
    HAMI_CU_FUNCTION_ATTRIBUTES(HAMI_ENUM_ITEM)
} CUfunction_attribute;
typedef enum CUfunc_cache_enum { HAMI_CU_FUNC_CACHES(HAMI_ENUM_ITEM) } CUfunc_cache;
typedef enum CUsharedconfig_enum { HAMI_CU_SHARED_CONFIGS(HAMI_ENUM_ITEM) } CUsharedconfig;
typedef enum CUmoduleLoadingMode_enum {
    HAMI_CU_MODULE_LOADING_MODES(HAMI_ENUM_ITEM)
} CUmoduleLoadingMode;
typedef enum CUoccupancy_flags_enum { HAMI_CU_OCCUPANCY_FLAGS(HAMI_ENUM_ITEM) } CUoccupancy_flags;
typedef size_t (*CUoccupancyB2DSize)(int blockSize);
typedef enum CUlimit_enum { HAMI_CU_LIMITS(HAMI_ENUM_ITEM) } CUlimit;
typedef enum CUctx_flags_enum { HAMI_CU_CTX_FLAGS(HAMI_ENUM_ITEM) } CUctx_flags;
typedef enum CUmemorytype_enum { HAMI_CU_MEMORY_TYPES(HAMI_ENUM_ITEM) } CUmemorytype;
typedef enum CUpointer_attribute_enum { HAMI_CU_POINTER_ATTRIBUTES(HAMI_ENUM_ITEM) } CUpointer_attribute;
typedef void (*CUhostFn)(void *userData);
typedef enum CUlogLevel_enum { CU_LOG_LEVEL_ERROR = 0, CU_LOG_LEVEL_WARNING = 1 } CUlogLevel;
typedef struct CUlogsCallbackEntry_st *CUlogsCallbackHandle;
typedef void (*CUlogsCallback)(void *data, CUlogLevel logLevel, char *message, size_t length);
typedef unsigned int CUlogIterator;
typedef struct CUmulticastObjectProp_st CUmulticastObjectProp; /* only passed by pointer here */
typedef struct CUdevResource_st CUdevResource;                 /* only passed by pointer here */
typedef struct CUdevResourceDesc_st *CUdevResourceDesc;
typedef enum {
    CU_DEV_RESOURCE_TYPE_INVALID = 0,
    CU_DEV_RESOURCE_TYPE_SM = 1
} CUdevResourceType;
typedef enum CUmulticastGranularity_flags_enum {
    CU_MULTICAST_GRANULARITY_MINIMUM = 0x0,
    CU_MULTICAST_GRANULARITY_RECOMMENDED = 0x1
} CUmulticastGranularity_flags;
typedef enum CUgraphNodeType_enum { HAMI_CU_GRAPH_NODE_TYPES(HAMI_ENUM_ITEM) } CUgraphNodeType;
typedef enum CUstreamBatchMemOpType_enum {
    HAMI_CU_STREAM_MEM_OP_TYPES(HAMI_ENUM_ITEM)
} CUstreamBatchMemOpType;
typedef enum CUdevice_P2PAttribute_enum { HAMI_CU_P2P_ATTRIBUTES(HAMI_ENUM_ITEM) } CUdevice_P2PAttribute;
typedef void (*CUstreamCallback)(CUstream hStream, CUresult status, void *userData);
typedef enum CUfunctionLoadingState_enum {
    HAMI_CU_FUNCTION_LOADING_STATES(HAMI_ENUM_ITEM)
} CUfunctionLoadingState;

/* Plain macros of cuda.h; HAMI_CU_MACRO_VALUES repeats them for the conformance check. */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_MEMHOSTREGISTER_IOMEMORY 0x04
#define CU_IPC_HANDLE_SIZE 64
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08

#else /* HAMI_CUDA_CONFORMANCE: the real cuda.h supplied every type above */
#define HAMI_T(name) hami_check_##name
#endif

/* Structs, with the real layouts (one member per line: the conformance test reads them). */
typedef struct HAMI_T(CUuuid_st) {
    char bytes[16];
} HAMI_T(CUuuid);

typedef struct HAMI_T(CUDA_ARRAY_DESCRIPTOR_st) {
    size_t Width;
    size_t Height;
    CUarray_format Format;
    unsigned int NumChannels;
} HAMI_T(CUDA_ARRAY_DESCRIPTOR);

typedef struct HAMI_T(CUDA_ARRAY3D_DESCRIPTOR_st) {
    size_t Width;
    size_t Height;
    size_t Depth;
    CUarray_format Format;
    unsigned int NumChannels;
    unsigned int Flags;
} HAMI_T(CUDA_ARRAY3D_DESCRIPTOR);

typedef struct HAMI_T(CUmemLocation_st) {
    CUmemLocationType type;
    int id;
} HAMI_T(CUmemLocation);

typedef struct HAMI_T(CUmemAllocationProp_st) {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    HAMI_T(CUmemLocation) location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} HAMI_T(CUmemAllocationProp);

typedef struct HAMI_T(CUipcMemHandle_st) {
    char reserved[CU_IPC_HANDLE_SIZE];
} HAMI_T(CUipcMemHandle);

typedef struct HAMI_T(CUmemAccessDesc_st) {
    HAMI_T(CUmemLocation) location;
    CUmemAccess_flags flags;
} HAMI_T(CUmemAccessDesc);

/* gpuDirectRDMACapable came with CUDA 13 (it was the first reserved byte before). */
typedef struct HAMI_T(CUmemPoolProps_st) {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    HAMI_T(CUmemLocation) location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char gpuDirectRDMACapable;
    unsigned char reserved[53];
} HAMI_T(CUmemPoolProps);

typedef struct HAMI_T(CUexecAffinityParam_st) {
    CUexecAffinityType type;
    union {
        struct {
            unsigned int val;
        } smCount;
    } param;
} HAMI_T(CUexecAffinityParam);

typedef struct HAMI_T(CUctxCigParam_st) {
    CUcigDataType sharedDataType;
    void *sharedData;
} HAMI_T(CUctxCigParam);

typedef struct HAMI_T(CUctxCreateParams_st) {
    HAMI_T(CUexecAffinityParam) *execAffinityParams;
    int numExecAffinityParams;
    HAMI_T(CUctxCigParam) *cigParams;
} HAMI_T(CUctxCreateParams);

/* Only the members the simulator reads, `pad` for the real 64-byte size and one
 * pointer-holding member for the real 8-byte alignment. */
typedef union HAMI_T(CUlaunchAttributeValue_union) {
    char pad[64];
    int cooperative;
    int priority;
    struct {
        CUevent event;
        int flags;
    } launchCompletionEvent;
} HAMI_T(CUlaunchAttributeValue);

typedef struct HAMI_T(CUlaunchAttribute_st) {
    CUlaunchAttributeID id;
    char pad[8 - sizeof(CUlaunchAttributeID)];
    HAMI_T(CUlaunchAttributeValue) value;
} HAMI_T(CUlaunchAttribute);

typedef struct HAMI_T(CUlaunchConfig_st) {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    HAMI_T(CUlaunchAttribute) *attrs;
    unsigned int numAttrs;
} HAMI_T(CUlaunchConfig);

typedef struct HAMI_T(CUDA_KERNEL_NODE_PARAMS_st) {
    CUfunction func;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
} HAMI_T(CUDA_KERNEL_NODE_PARAMS_v1);

typedef struct HAMI_T(CUDA_KERNEL_NODE_PARAMS_v2_st) {
    CUfunction func;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} HAMI_T(CUDA_KERNEL_NODE_PARAMS_v2);

typedef struct HAMI_T(CUDA_MEMCPY2D_st) {
    size_t srcXInBytes;
    size_t srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes;
    size_t dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes;
    size_t Height;
} HAMI_T(CUDA_MEMCPY2D_v2);

/* The write and wait operations of cuStreamBatchMemOp (the others are refused). */
typedef union HAMI_T(CUstreamBatchMemOpParams_union) {
    CUstreamBatchMemOpType operation;
    struct {
        CUstreamBatchMemOpType operation;
        CUdeviceptr address;
        union {
            cuuint32_t value;
            cuuint64_t value64;
        };
        unsigned int flags;
        CUdeviceptr alias;
    } waitValue;
    struct {
        CUstreamBatchMemOpType operation;
        CUdeviceptr address;
        union {
            cuuint32_t value;
            cuuint64_t value64;
        };
        unsigned int flags;
        CUdeviceptr alias;
    } writeValue;
    cuuint64_t pad[6];
} HAMI_T(CUstreamBatchMemOpParams_v1);

/* The structs checked by the conformance test (one name per entry). */
#define HAMI_CU_STRUCTS(X)                                                                     \
    X(CUuuid) X(CUDA_ARRAY_DESCRIPTOR) X(CUDA_ARRAY3D_DESCRIPTOR) X(CUmemLocation)             \
    X(CUmemAllocationProp) X(CUmemAccessDesc) X(CUmemPoolProps) X(CUexecAffinityParam)         \
    X(CUctxCigParam) X(CUctxCreateParams) X(CUlaunchAttributeValue) X(CUlaunchAttribute)       \
    X(CUlaunchConfig)

#ifndef HAMI_CUDA_CONFORMANCE
typedef CUDA_MEMCPY2D_v2 CUDA_MEMCPY2D;
typedef CUstreamBatchMemOpParams_v1 CUstreamBatchMemOpParams;
#include "hami_cuda_api.h"

/* Bytes per channel of an array element in format `f`; 0 for a format not listed above. */
static inline size_t hami_array_format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT:
        return 4;
    default: return 0;
    }
}
#endif

#endif /* HAMI_CUDA_H */
