"""Memory pools, virtual memory management and arrays, as the shim will see them."""
MiB = 1 << 20


def test_pool_reserves_in_chunks_and_trims_at_synchronize(sim):
    out, _ = sim.run('''
        ctx = context(0)
        A = cu.CUmemPool_attribute
        def attr(pool, a): return int(ok(cu.cuMemPoolGetAttribute(pool, a)))
        pool = ok(cu.cuDeviceGetDefaultMemPool(0))
        stream = ok(cu.cuStreamCreate(0))
        base = used()
        p1 = ok(cu.cuMemAllocAsync(1 * 1024**2, stream))
        p2 = ok(cu.cuMemAllocFromPoolAsync(3 * 1024**2, pool, stream))
        say(step="alloc", device=used() - base,
            reserved=attr(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            used=attr(pool, A.CU_MEMPOOL_ATTR_USED_MEM_CURRENT))
        ok(cu.cuMemFreeAsync(p2, stream))
        say(step="freed", device=used() - base,
            reserved=attr(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            used=attr(pool, A.CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
            used_high=attr(pool, A.CU_MEMPOOL_ATTR_USED_MEM_HIGH))
        ok(cu.cuStreamSynchronize(stream))
        say(step="synced", device=used() - base,
            reserved=attr(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT))
        ok(cu.cuMemPoolSetAttribute(pool, A.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                    cu.cuuint64_t(64 * 1024**2)))
        p3 = ok(cu.cuMemAllocAsync(40 * 1024**2, stream)); ok(cu.cuMemFreeAsync(p3, stream))  # grows by 40 MiB
        ok(cu.cuStreamSynchronize(stream))
        kept = attr(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
        ok(cu.cuMemPoolTrimTo(pool, 0))
        say(step="threshold", kept=kept, trimmed=attr(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            device=used() - base)
    ''')
    assert out[0] == {"step": "alloc", "device": 32 * MiB, "reserved": 32 * MiB, "used": 4 * MiB}
    assert out[1] == {"step": "freed", "device": 32 * MiB, "reserved": 32 * MiB, "used": MiB,
                      "used_high": 4 * MiB}
    assert out[2] == {"step": "synced", "device": 2 * MiB, "reserved": 2 * MiB}
    assert out[3] == {"step": "threshold", "kept": 42 * MiB, "trimmed": 2 * MiB,
                      "device": 2 * MiB}


def test_created_pool_counts_against_the_device_and_can_run_out(sim):
    out, _ = sim.run('''
        ctx = context(1)                                    # 2 GiB
        props = cu.CUmemPoolProps()
        props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = 1
        pool = ok(cu.cuMemPoolCreate(props))
        stream = ok(cu.cuStreamCreate(0))
        big = ok(cu.cuMemAllocFromPoolAsync(1536 * 1024**2, pool, stream))
        say(second=error_name(cu.cuMemAllocFromPoolAsync(1024**3, pool, stream)),
            plain=error_name(cu.cuMemAlloc(1024**3)))
        ok(cu.cuMemFreeAsync(big, stream)); ok(cu.cuMemPoolDestroy(pool))
        free, total = ok(cu.cuMemGetInfo())
        say(free=free, total=total)
    ''')
    assert out[0] == {"second": "CUDA_ERROR_OUT_OF_MEMORY", "plain": "CUDA_ERROR_OUT_OF_MEMORY"}
    assert out[1]["free"] == out[1]["total"]


def test_vmm_physical_memory_is_counted_mapped_and_usable(sim):
    out, _ = sim.run('''
        ctx = context(0)
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = 0
        gran = ok(cu.cuMemGetAllocationGranularity(
            prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
        bad = error_name(cu.cuMemCreate(gran + 1, prop, 0))
        handle = ok(cu.cuMemCreate(2 * gran, prop, 0))
        after_create = used()
        va = ok(cu.cuMemAddressReserve(4 * gran, 0, 0, 0))
        ok(cu.cuMemMap(va, 2 * gran, 0, handle, 0))
        access = cu.CUmemAccessDesc()
        access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = 0
        access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        ok(cu.cuMemSetAccess(va, 2 * gran, [access], 1))
        ok(cu.cuMemcpyHtoD(int(va) + gran, b"mapped!", 7))
        back = bytearray(7); ok(cu.cuMemcpyDtoH(back, int(va) + gran, 7))
        ok(cu.cuMemRelease(handle))
        still_mapped = used()
        ok(cu.cuMemUnmap(va, 2 * gran))
        say(gran=gran, bad=bad, created=after_create, data=back.decode(),
            released_but_mapped=still_mapped, unmapped=used())
        ok(cu.cuMemAddressFree(va, 4 * gran))
    ''')
    assert out == [{"gran": 2 * MiB, "bad": "CUDA_ERROR_INVALID_VALUE", "created": 4 * MiB,
                    "data": "mapped!", "released_but_mapped": 4 * MiB, "unmapped": 0}]


def test_arrays_take_memory_from_their_descriptor(sim):
    out, _ = sim.run('''
        ctx = context(0)
        d = cu.CUDA_ARRAY_DESCRIPTOR()
        d.Width, d.Height, d.NumChannels = 1024, 1024, 4
        d.Format = cu.CUarray_format.CU_AD_FORMAT_FLOAT
        arr = ok(cu.cuArrayCreate(d))
        a2 = used()
        d3 = cu.CUDA_ARRAY3D_DESCRIPTOR()
        d3.Width, d3.Height, d3.Depth, d3.NumChannels = 64, 64, 64, 1
        d3.Format = cu.CUarray_format.CU_AD_FORMAT_UNSIGNED_INT8
        arr3 = ok(cu.cuArray3DCreate(d3))
        a3 = used() - a2
        desc = ok(cu.cuArray3DGetDescriptor(arr3))
        ok(cu.cuArrayDestroy(arr)); ok(cu.cuArrayDestroy(arr3))
        say(two_d=a2, three_d=a3, depth=desc.Depth, after=used())
    ''')
    # used moves in 2 MiB pages: the 256 KiB 3D array shows as one page
    assert out == [{"two_d": 16 * MiB, "three_d": 2 * MiB, "depth": 64, "after": 0}]


def test_mipmapped_arrays_count_every_level(sim):
    out, _ = sim.run('''
        ctx = context(0)
        d = cu.CUDA_ARRAY3D_DESCRIPTOR()
        d.Width, d.Height, d.Depth = 1024, 1024, 0
        d.Format = cu.CUarray_format.CU_AD_FORMAT_FLOAT
        d.NumChannels = 4
        base = used()
        m = ok(cu.cuMipmappedArrayCreate(d, 3))       # 16 MiB + 4 MiB + 1 MiB
        held = used() - base
        ok(cu.cuMipmappedArrayDestroy(m))
        say(held=held, after=used() - base,
            too_many=error_name(cu.cuMipmappedArrayCreate(d, 12)))
    ''')
    assert out == [{"held": 22 * MiB, "after": 0, "too_many": "CUDA_ERROR_INVALID_VALUE"}]
