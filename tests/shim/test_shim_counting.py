"""Every counted path, through cuda-python (cuGetProcAddress) under hami-run --sim: each
allocation is charged as the driver rounds it, each free gives back exactly that, the limit
refuses what the device itself would still allow, and the container's use ends at 0."""
MiB = 1 << 20


def test_plain_pitched_and_managed_memory(shim):
    out, _, _ = shim.run('''
        ctx = context(0)
        a = ok(cu.cuMemAlloc(100 * MiB))
        say(step="alloc", used=used(), total=ok(cu.cuMemGetInfo())[1])
        p, pitch = ok(cu.cuMemAllocPitch(1000, 1000, 4))
        say(step="pitch", used=used(), pitch=pitch)
        m = ok(cu.cuMemAllocManaged(3 * MiB, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL))
        say(step="managed", used=used())
        say(step="over", refused=name(cu.cuMemAlloc(1000 * MiB)), used=used())
        for ptr in (a, p, m):
            ok(cu.cuMemFree(ptr))
        say(step="freed", used=used())
    ''')
    # 1000 rows of the driver's 1024-byte pitch (1000 KiB), which the driver counts in whole
    # 2 MiB pages: the container's view is the driver's count (it used to show 1000 KiB).
    pitched = 2 * MiB
    assert out == [
        {"step": "alloc", "used": 100 * MiB, "total": 1024 * MiB},
        {"step": "pitch", "used": 100 * MiB + pitched, "pitch": 1024},
        {"step": "managed", "used": 104 * MiB + pitched},
        {"step": "over", "refused": "CUDA_ERROR_OUT_OF_MEMORY", "used": 104 * MiB + pitched},
        {"step": "freed", "used": 0}]
    assert shim.usage().devices[0].used == 0


def test_arrays_and_mipmapped_arrays_count_their_descriptors(shim):
    out, _, _ = shim.run('''
        ctx = context(0)
        F = cu.CUarray_format.CU_AD_FORMAT_FLOAT
        d2 = cu.CUDA_ARRAY_DESCRIPTOR()
        d2.Width, d2.Height, d2.Format, d2.NumChannels = 1024, 1024, F, 1
        a2 = ok(cu.cuArrayCreate(d2))                                   # 4 MiB
        d3 = cu.CUDA_ARRAY3D_DESCRIPTOR()
        d3.Width, d3.Height, d3.Depth, d3.Format, d3.NumChannels = 256, 256, 16, F, 4
        a3 = ok(cu.cuArray3DCreate(d3))                                 # 16 MiB
        d3.Width, d3.Height, d3.Depth = 1024, 1024, 0
        mm = ok(cu.cuMipmappedArrayCreate(d3, 3))                       # 16+4+1 -> 22 MiB
        say(step="made", used=used())
        d3.Width, d3.Height = 16384, 8192                               # 2 GiB: > limit
        say(step="big", refused=name(cu.cuArray3DCreate(d3)),
            refused_mip=name(cu.cuMipmappedArrayCreate(d3, 2)))
        ok(cu.cuArrayDestroy(a2)); ok(cu.cuArrayDestroy(a3)); ok(cu.cuMipmappedArrayDestroy(mm))
        say(step="gone", used=used())
    ''')
    assert out == [{"step": "made", "used": 42 * MiB},
                   {"step": "big", "refused": "CUDA_ERROR_OUT_OF_MEMORY",
                    "refused_mip": "CUDA_ERROR_OUT_OF_MEMORY"},
                   {"step": "gone", "used": 0}]


def test_physical_handles_count_until_released(shim):
    out, _, _ = shim.run('''
        ctx = context(0)
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = 0
        h1 = ok(cu.cuMemCreate(64 * MiB, prop, 0))
        h2 = ok(cu.cuMemCreate(512 * MiB, prop, 0))
        say(step="created", used=used(), refused=name(cu.cuMemCreate(512 * MiB, prop, 0)))
        ok(cu.cuMemRelease(h2))
        say(step="released", used=used(), again=name(cu.cuMemRelease(h2)), after=used())
        ok(cu.cuMemRelease(h1))
        say(step="all", used=used())
    ''')
    assert out == [
        {"step": "created", "used": 576 * MiB, "refused": "CUDA_ERROR_OUT_OF_MEMORY"},
        {"step": "released", "used": 64 * MiB, "again": "CUDA_ERROR_INVALID_VALUE",
         "after": 64 * MiB},
        {"step": "all", "used": 0}]


def test_pools_count_their_reservation_and_give_it_back_when_it_shrinks(shim):
    out, _, _ = shim.run('''
        ctx = context(0)
        A = cu.CUmemPool_attribute
        s = ok(cu.cuStreamCreate(0))
        p1 = ok(cu.cuMemAllocAsync(1 * MiB, s))          # the default pool reserves 32 MiB
        say(step="async", used=used())
        props = cu.CUmemPoolProps()
        props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = 0
        pool = ok(cu.cuMemPoolCreate(props))
        p2 = ok(cu.cuMemAllocFromPoolAsync(100 * MiB, pool, s))
        say(step="pool", used=used())
        say(step="over", refused=name(cu.cuMemAllocFromPoolAsync(900 * MiB, pool, s)),
            used=used())
        ok(cu.cuMemFreeAsync(p1, s))
        say(step="freed", used=used())                    # still reserved until a sync
        ok(cu.cuStreamSynchronize(s))
        say(step="synced", used=used())
        ok(cu.cuMemPoolDestroy(pool))
        say(step="destroyed", used=used())
    ''')
    assert out == [{"step": "async", "used": 32 * MiB},
                   {"step": "pool", "used": 132 * MiB},
                   {"step": "over", "refused": "CUDA_ERROR_OUT_OF_MEMORY", "used": 132 * MiB},
                   {"step": "freed", "used": 132 * MiB},
                   {"step": "synced", "used": 100 * MiB},
                   {"step": "destroyed", "used": 0}]


def test_a_pool_growing_past_the_limit_is_trimmed_back_to_what_it_uses(shim):
    out, _, _ = shim.run('''
        ctx = context(0)
        A = cu.CUmemPool_attribute
        s = ok(cu.cuStreamCreate(0))
        pool = ok(cu.cuDeviceGetDefaultMemPool(0))
        ok(cu.cuMemPoolSetAttribute(pool, A.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                    cu.cuuint64_t(1 << 40)))
        ptrs = [ok(cu.cuMemAllocAsync(3 * MiB, s)) for _ in range(6)]   # 18 MiB of 20
        reserved = int(ok(cu.cuMemPoolGetAttribute(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)))
        say(used=used(), reserved=reserved, refused=name(cu.cuMemAllocAsync(3 * MiB, s)))
        ok(cu.cuMemPoolTrimTo(pool, 0))
        for p in ptrs:
            ok(cu.cuMemFreeAsync(p, s))
        ok(cu.cuMemPoolTrimTo(pool, 0))
        say(after=used())
    ''', limit="20m")
    assert out == [{"used": 18 * MiB, "reserved": 18 * MiB, "refused": "CUDA_ERROR_OUT_OF_MEMORY"},
                   {"after": 0}]


def test_contexts_cost_the_configured_overhead(shim):
    env = dict(shim.env, HAMI_SIM_CTX_OVERHEAD="300m", HAMI_VGPU_CONTEXT_OVERHEAD="300m")
    out, _, _ = shim.run('''
        ok(cu.cuInit(0))
        dev = ok(cu.cuDeviceGet(0))
        c1 = ok(cu.cuCtxCreate(None, 0, dev))
        c2 = ok(cu.cuCtxCreate(None, 0, dev))
        say(step="two", used=used())
        p1 = ok(cu.cuDevicePrimaryCtxRetain(dev)); p2 = ok(cu.cuDevicePrimaryCtxRetain(dev))
        say(step="primary", used=used(), fourth=name(cu.cuCtxCreate(None, 0, dev)))
        ok(cu.cuDevicePrimaryCtxRelease(dev))
        say(step="one_release", used=used())
        ok(cu.cuDevicePrimaryCtxRelease(dev)); ok(cu.cuCtxDestroy(c2))
        say(step="left", used=used())
    ''', env=env)
    assert out == [{"step": "two", "used": 600 * MiB},
                   {"step": "primary", "used": 900 * MiB, "fourth": "CUDA_ERROR_OUT_OF_MEMORY"},
                   {"step": "one_release", "used": 900 * MiB},
                   {"step": "left", "used": 300 * MiB}]


def test_unknown_and_double_frees_pass_through_and_never_underflow(shim):
    out, _, _ = shim.run('''
        ctx = context(0)
        a = ok(cu.cuMemAlloc(10 * MiB)); b = ok(cu.cuMemAlloc(10 * MiB))
        ok(cu.cuMemFree(a))
        say(double=name(cu.cuMemFree(a)), bogus=name(cu.cuMemFree(0xdead0000)), used=used())
        ok(cu.cuMemFree(b))
        say(used=used())
    ''')
    assert out == [{"double": "CUDA_ERROR_INVALID_VALUE", "bogus": "CUDA_ERROR_INVALID_VALUE",
                    "used": 10 * MiB}, {"used": 0}]
    device = shim.usage().devices[0]
    assert device.used == 0 and device.peak == 20 * MiB
