/* The two halves of every counted object's life, shared by the memory, array, context and
 * VMM hooks: reserve before the driver is asked (so a refusal is atomic across processes),
 * record on success or give back on failure; on release, give back exactly what was recorded,
 * and only once the driver agreed. An object the shim never recorded is passed through and
 * never subtracted, so counters cannot underflow. */
#include "vgpu.h"

CUresult vgpu_count_begin(int rec, uint64_t bytes)
{
    vgpu_footprint_check(rec, bytes); /* near the limit: the driver's figure, fresh */
    if (vgpu_charge(rec, bytes) == 0)
        return CUDA_SUCCESS;
    /* A synchronize may have shrunk this process's pools since they were last read, and the
     * driver's figure may have fallen: a refusal is decided on fresh figures only. */
    vgpu_pools_reconcile();
    vgpu_footprint_refresh(rec);
    return vgpu_charge(rec, bytes) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult vgpu_count_end(CUresult rc, enum vgpu_kind kind, uintptr_t key, int rec, uint64_t bytes)
{
    if (rc != CUDA_SUCCESS) {
        vgpu_uncharge(rec, bytes);
        return rc;
    }
    struct vgpu_entry old;
    int put = vgpu_map_put(kind, key, bytes, rec, &old);
    if (put == 1) /* freed behind the shim's back (its context was destroyed): stop counting it */
        vgpu_uncharge(old.rec, old.bytes);
    if (put < 0) {
        vgpu_log(VGPU_LOG_WARN, "out of host memory to track an allocation; it is not counted");
        vgpu_uncharge(rec, bytes);
    }
    return rc;
}

CUresult vgpu_count_release(CUresult rc, enum vgpu_kind kind, uintptr_t key, int had,
                            const struct vgpu_entry *e)
{
    if (!had)
        return rc;
    if (rc == CUDA_SUCCESS)
        vgpu_uncharge(e->rec, e->bytes);
    else /* the driver kept it: keep counting it */
        vgpu_map_put(kind, key, e->bytes, e->rec, NULL);
    return rc;
}
