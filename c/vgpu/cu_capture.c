/* Stream capture and the compute limiter. A launch on a capturing stream is recorded into a
 * graph instead of running, so it is not charged (the graph is, each time it is launched).
 * While any capture is active, CUDA forbids "unsafe" calls such as event queries in the
 * capturing thread, and in global mode in every thread; the limiter then touches no event at
 * all (it charges known costs and measures nothing). These hooks keep the count of active
 * captures so that the common case (no capture) costs one load per launch. */
#include "limiter.h"
#include "vgpu.h"

static int captures; /* begun and not yet ended, in this process */

int vgpu_capture_active(void) { return __atomic_load_n(&captures, __ATOMIC_RELAXED) > 0; }

int vgpu_stream_captures(CUstream stream, int per_thread)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc = per_thread ? CALL_CU(cuStreamIsCapturing_ptsz, stream, &status)
                             : CALL_CU(cuStreamIsCapturing, stream, &status);
    return rc != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

static CUresult begun(CUresult rc)
{
    if (rc == CUDA_SUCCESS)
        __atomic_fetch_add(&captures, 1, __ATOMIC_RELAXED);
    return rc;
}

/* A capture ends with success, or invalidated / unjoined (the graph is lost but the stream
 * no longer captures); other errors (wrong thread, not capturing) leave captures as they were. */
static CUresult ended(CUresult rc)
{
    if ((rc == CUDA_SUCCESS || rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
         rc == CUDA_ERROR_STREAM_CAPTURE_UNJOINED) &&
        __atomic_sub_fetch(&captures, 1, __ATOMIC_RELAXED) < 0)
        __atomic_store_n(&captures, 0, __ATOMIC_RELAXED); /* begun through an unhooked entry */
    /* Pool figures were not read during the capture (unsafe then): settle them now. */
    vgpu_pools_reconcile();
    return rc;
}

CUresult hook_cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    return begun(CALL_CU(cuStreamBeginCapture_v2, s, mode));
}

CUresult hook_cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    return begun(CALL_CU(cuStreamBeginCapture_v2_ptsz, s, mode));
}

CUresult hook_cuStreamEndCapture(CUstream s, CUgraph *graph)
{
    return ended(CALL_CU(cuStreamEndCapture, s, graph));
}

CUresult hook_cuStreamEndCapture_ptsz(CUstream s, CUgraph *graph)
{
    return ended(CALL_CU(cuStreamEndCapture_ptsz, s, graph));
}
