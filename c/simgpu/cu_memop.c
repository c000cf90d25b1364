/* Stream memory operations and multicast objects.
 *
 * cuStreamWriteValue* writes when the stream reaches the write: the simulator waits for the
 * stream's earlier work, then writes (the caller is held back meanwhile; order is real).
 * cuStreamWaitValue* is modelled only when the condition already holds; a wait that would
 * block the stream on a later write is refused with CUDA_ERROR_NOT_SUPPORTED and a driver log
 * line. Multicast objects need NVSwitch: simulated devices have none, so creating one is not
 * supported, as on a PCIe machine (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED reads 0). */
#include "cu_internal.h"

static CUresult write_value(CUstream h, CUdeviceptr addr, uint64_t value, int wide, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!addr || (addr & (wide ? 7 : 3)))
        return CUDA_ERROR_INVALID_VALUE;
    if (s->capture)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    sim_tl_sync_stream(s, 0);
    if (wide)
        __atomic_store_n((uint64_t *)(uintptr_t)addr, value, __ATOMIC_RELEASE);
    else
        __atomic_store_n((uint32_t *)(uintptr_t)addr, (uint32_t)value, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

static int holds(uint64_t have, uint64_t want, unsigned int flags)
{
    switch (flags & 3) {
    case 0: return have >= want; /* CU_STREAM_WAIT_VALUE_GEQ (32-bit values wrap-compared) */
    case 1: return have == want; /* EQ */
    case 2: return (have & want) != 0; /* AND */
    default: return ~(have | want) != 0; /* NOR */
    }
}

static CUresult wait_value(CUstream h, CUdeviceptr addr, uint64_t value, unsigned int flags,
                           int wide, int pt)
{
    struct CUstream_st *s = NULL;
    CUresult rc = sim_stream(h, pt, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!addr || (addr & (wide ? 7 : 3)))
        return CUDA_ERROR_INVALID_VALUE;
    if (!wide)
        value = (uint32_t)value;
    uint64_t have = wide ? __atomic_load_n((uint64_t *)(uintptr_t)addr, __ATOMIC_ACQUIRE)
                         : __atomic_load_n((uint32_t *)(uintptr_t)addr, __ATOMIC_ACQUIRE);
    if (holds(have, value, flags))
        return CUDA_SUCCESS;
    sim_driver_log("cuStreamWaitValue: a stream waiting for a later write is not modelled by "
                   "the simulated driver");
    return CUDA_ERROR_NOT_SUPPORTED;
}

#define VALUE_OPS(suffix, pt)                                                                   \
    SIM_API CUresult cuStreamWriteValue32##suffix(CUstream s, CUdeviceptr a, cuuint32_t v,      \
                                                  unsigned int f)                               \
    {                                                                                           \
        (void)f;                                                                                \
        return write_value(s, a, v, 0, pt);                                                     \
    }                                                                                           \
    SIM_API CUresult cuStreamWriteValue64##suffix(CUstream s, CUdeviceptr a, cuuint64_t v,      \
                                                  unsigned int f)                               \
    {                                                                                           \
        (void)f;                                                                                \
        return write_value(s, a, v, 1, pt);                                                     \
    }                                                                                           \
    SIM_API CUresult cuStreamWaitValue32##suffix(CUstream s, CUdeviceptr a, cuuint32_t v,       \
                                                 unsigned int f)                                \
    {                                                                                           \
        return wait_value(s, a, v, f, 0, pt);                                                   \
    }                                                                                           \
    SIM_API CUresult cuStreamWaitValue64##suffix(CUstream s, CUdeviceptr a, cuuint64_t v,       \
                                                 unsigned int f)                                \
    {                                                                                           \
        return wait_value(s, a, v, f, 1, pt);                                                   \
    }

VALUE_OPS(, 0)
VALUE_OPS(_ptsz, 1)
VALUE_OPS(_v2, 0)
VALUE_OPS(_v2_ptsz, 1)

SIM_API CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle,
                                   const CUmulticastObjectProp *prop)
{
    CUresult rc = sim_cu_ready();
    if (rc == CUDA_SUCCESS && (!mcHandle || !prop))
        rc = CUDA_ERROR_INVALID_VALUE;
    return rc == CUDA_SUCCESS ? CUDA_ERROR_NOT_SUPPORTED : rc;
}

SIM_API CUresult cuMulticastGetGranularity(size_t *granularity, const CUmulticastObjectProp *prop,
                                           CUmulticastGranularity_flags option)
{
    CUresult rc = sim_cu_ready();
    (void)option;
    if (rc == CUDA_SUCCESS && (!granularity || !prop))
        rc = CUDA_ERROR_INVALID_VALUE;
    return rc == CUDA_SUCCESS ? CUDA_ERROR_NOT_SUPPORTED : rc;
}

/* No multicast handle can exist, so every use of one is an invalid value. */
SIM_API CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev)
{
    (void)mcHandle, (void)dev;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                    CUmemGenericAllocationHandle memHandle, size_t memOffset,
                                    size_t size, unsigned long long flags)
{
    (void)mcHandle, (void)mcOffset, (void)memHandle, (void)memOffset, (void)size, (void)flags;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                     CUdeviceptr memptr, size_t size, unsigned long long flags)
{
    (void)mcHandle, (void)mcOffset, (void)memptr, (void)size, (void)flags;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev,
                                   size_t mcOffset, size_t size)
{
    (void)mcHandle, (void)dev, (void)mcOffset, (void)size;
    return CUDA_ERROR_INVALID_VALUE;
}

/* A batch of the write and wait operations above, in order; others are not modelled. */
static CUresult batch(CUstream h, unsigned int count, const CUstreamBatchMemOpParams *ops,
                      unsigned int flags, int pt)
{
    if (!ops || flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    for (unsigned int i = 0; i < count && rc == CUDA_SUCCESS; i++) {
        const CUstreamBatchMemOpParams *op = &ops[i];
        switch (op->operation) {
        case CU_STREAM_MEM_OP_WRITE_VALUE_32: case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            rc = write_value(h, op->writeValue.address, op->writeValue.value64,
                             op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64, pt);
            break;
        case CU_STREAM_MEM_OP_WAIT_VALUE_32: case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            rc = wait_value(h, op->waitValue.address, op->waitValue.value64, op->waitValue.flags,
                            op->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64, pt);
            break;
        case CU_STREAM_MEM_OP_BARRIER: case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
            break; /* memory is coherent in the simulator */
        default:
            rc = CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    return rc;
}

SIM_API CUresult cuStreamBatchMemOp(CUstream h, unsigned int count, CUstreamBatchMemOpParams *ops,
                                    unsigned int flags)
{
    return batch(h, count, ops, flags, 0);
}

SIM_API CUresult cuStreamBatchMemOp_ptsz(CUstream h, unsigned int count,
                                         CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    return batch(h, count, ops, flags, 1);
}

SIM_API CUresult cuStreamBatchMemOp_v2(CUstream h, unsigned int count,
                                       CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    return batch(h, count, ops, flags, 0);
}

SIM_API CUresult cuStreamBatchMemOp_v2_ptsz(CUstream h, unsigned int count,
                                            CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    return batch(h, count, ops, flags, 1);
}
