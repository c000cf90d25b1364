#!/usr/bin/env python3
"""Regenerates c/include/hami_cuda_procs_table.h from a real cudaTypedefs.h (developer tool).

The real header names one `PFN_<api>_v<version>[_ptds|_ptsz]` typedef per ABI of each driver
API. The exported symbol serving an ABI follows the driver's naming rule: the first ABI of an
API is the plain name, the k-th one gets `_v<k>`; a per-thread-default-stream ABI is the
symbol of the newest plain ABI at that version plus `_ptds` / `_ptsz`. The few APIs that break
the rule are listed in EXCEPTIONS. The output is committed, so builds never need CUDA; the
header conformance test checks the committed table against cudaTypedefs.h where it exists.

usage: gen_cuda_procs.py [/usr/local/cuda/include/cudaTypedefs.h] > c/include/hami_cuda_procs_table.h
       gen_cuda_procs.py --driver [cudaTypedefs.h] > c/simgpu/driver_procs_table.h

--driver writes every API of cudaTypedefs.h (the simulated driver answers cuGetProcAddress from
that table, so its answers never depend on the list of APIs the shim hooks).
"""
import re
import sys

# The APIs the simulator implements or the shim may hook, grouped as in the driver docs.
APIS = """
cuInit cuDriverGetVersion cuGetProcAddress cuGetErrorName cuGetErrorString
cuDeviceGet cuDeviceGetCount cuDeviceGetName cuDeviceGetUuid cuDeviceTotalMem
cuDeviceGetAttribute cuDeviceGetPCIBusId cuDeviceGetDefaultMemPool cuDeviceGetMemPool
cuDeviceSetMemPool
cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease cuDevicePrimaryCtxReset
cuDevicePrimaryCtxGetState cuDevicePrimaryCtxSetFlags
cuCtxCreate cuCtxDestroy cuCtxSetCurrent cuCtxGetCurrent cuCtxPushCurrent cuCtxPopCurrent
cuCtxGetDevice cuCtxSynchronize
cuMemAlloc cuMemFree cuMemAllocPitch cuMemAllocManaged cuMemAllocHost cuMemFreeHost
cuMemHostAlloc cuMemGetInfo cuMemGetAddressRange
cuMemcpy cuMemcpyAsync cuMemcpyHtoD cuMemcpyDtoH cuMemcpyDtoD cuMemcpyHtoDAsync
cuMemcpyDtoHAsync cuMemcpyDtoDAsync cuMemsetD8 cuMemsetD16 cuMemsetD32 cuMemsetD8Async
cuMemsetD16Async cuMemsetD32Async
cuMemAllocAsync cuMemFreeAsync cuMemAllocFromPoolAsync cuMemPoolCreate cuMemPoolDestroy
cuMemPoolSetAttribute cuMemPoolGetAttribute cuMemPoolTrimTo
cuMemCreate cuMemRelease cuMemAddressReserve cuMemAddressFree cuMemMap cuMemUnmap
cuMemSetAccess cuMemGetAllocationGranularity
cuArrayCreate cuArray3DCreate cuArrayDestroy cuArrayGetDescriptor cuArray3DGetDescriptor
cuMipmappedArrayCreate cuMipmappedArrayDestroy
cuStreamCreate cuStreamCreateWithPriority cuStreamDestroy cuStreamSynchronize cuStreamQuery
cuStreamWaitEvent cuStreamBeginCapture cuStreamEndCapture cuStreamIsCapturing
cuEventCreate cuEventRecord cuEventRecordWithFlags cuEventQuery cuEventSynchronize
cuEventDestroy cuEventElapsedTime
cuModuleLoad cuModuleLoadData cuModuleLoadDataEx cuModuleUnload cuModuleGetFunction
cuLibraryLoadData cuLibraryUnload cuLibraryGetKernel cuKernelGetFunction
cuLaunchKernel cuLaunchKernelEx cuLaunchCooperativeKernel
cuGraphCreate cuGraphDestroy cuGraphInstantiate cuGraphInstantiateWithFlags cuGraphLaunch
cuGraphExecDestroy cuThreadExchangeStreamCaptureMode cuDeviceGetGraphMemAttribute
cuDeviceSetGraphMemAttribute cuDeviceGraphMemTrim
""".split()

# (api, version, flavour, symbol, PFN typedef) rows the naming rule cannot produce.
EXCEPTIONS = [
    ("cuGraphInstantiate", 12000, "DEFAULT", "cuGraphInstantiateWithFlags",
     "PFN_cuGraphInstantiateWithFlags_v11040"),
]

PFN = re.compile(r"\bPFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\)")


def collect(text):
    """api -> sorted list of (version, suffix) found in cudaTypedefs.h."""
    found = {}
    for api, ver, suffix in PFN.findall(text):
        found.setdefault(api, set()).add((int(ver), suffix))
    return {api: sorted(v) for api, v in found.items()}


def rows_for(api, abis):
    """Applies the driver's symbol naming rule to one API's ABIs."""
    plain = [v for v, s in abis if not s]
    rows, names = [], {}
    for k, ver in enumerate(plain):
        names[ver] = api if k == 0 else f"{api}_v{k + 1}"
        rows.append((api, ver, "DEFAULT", names[ver], f"PFN_{api}_v{ver}"))
    for ver, suffix in abis:
        if suffix:
            base = names[max(v for v in plain if v <= ver)]
            flavour = suffix[1:].upper()
            rows.append((api, ver, flavour, base + suffix, f"PFN_{api}_v{ver}{suffix}"))
    return rows


def main(argv):
    driver = "--driver" in argv
    args = [a for a in argv[1:] if a != "--driver"]
    path = args[0] if args else "/usr/local/cuda/include/cudaTypedefs.h"
    found = collect(open(path, encoding="utf-8").read())
    apis = sorted(found) if driver else APIS
    missing = [a for a in apis if a not in found]
    if missing:
        sys.exit(f"not in {path}: {' '.join(missing)}")
    rows = [r for api in apis for r in rows_for(api, found[api])] + EXCEPTIONS
    print(DRIVER_HEADER if driver else HEADER)
    for api, ver, flavour, symbol, pfn in rows:
        print(f"    X({api}, {ver}, {flavour}, {symbol}, {pfn}) \\")
    print(FOOTER)


HEADER = """\
/* Versioned CUDA driver entry points, one row per ABI: X(API, VERSION, FLAVOUR, SYMBOL, PFN).
 * GENERATED by c/tools/gen_cuda_procs.py from the real cudaTypedefs.h; do not edit by hand.
 * Included by hami_cuda_procs.h, which documents the columns and does the lookups. */
#define HAMI_CUDA_PROCS(X) \\"""

DRIVER_HEADER = """\
/* Every versioned CUDA driver entry point of the real cudaTypedefs.h, one row per ABI:
 * X(API, VERSION, FLAVOUR, SYMBOL, PFN), as c/include/hami_cuda_procs_table.h.
 * GENERATED by c/tools/gen_cuda_procs.py --driver; do not edit by hand. The simulated
 * driver's cuGetProcAddress answers from it (cu_procs.c). */
#define HAMI_DRIVER_PROCS(X) \\"""

FOOTER = "    /* end of table */"


if __name__ == "__main__":
    main(sys.argv)
