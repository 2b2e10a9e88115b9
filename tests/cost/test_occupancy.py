"""Occupancy and waves (cost/occupancy.py) against cases worked out by hand from the CUDA
occupancy calculator's rules (the arithmetic is written beside each case), and on a GPU
machine against the driver's `cuOccupancyMaxActiveBlocksPerMultiprocessor` for compiled
kernels over a sweep of block sizes and shared-memory sizes."""

from __future__ import annotations

import functools

import pytest
from kernel_harness import ROOT, load_module

import tilevm as tv
from tilevm.backend.cuda import driver
from tilevm.cost.hardware import gpu, gpu_for_device
from tilevm.cost.occupancy import RESOURCES, blocks_per_sm, waves

H100, A100, L40S = gpu("h100"), gpu("a100"), gpu("l40s")
KIB = 1024


def test_the_briefs_case_registers_and_shared_memory_tie():
    # 256 threads = 8 warps; 64 regs x 32 = 2048 a warp (a multiple of 256)
    #   warps:     64 // 8 = 8
    #   registers: (65536 / 4 partitions = 16384) // 2048 = 8 warps a partition,
    #              x 4 = 32 warps -> 32 // 8 = 4
    #   shared:    48 KiB + 1 KiB reserved = 50176 (= 392 x 128); 233472 // 50176 = 4
    #   blocks:    32; barriers: 64 // 1
    occ = blocks_per_sm(H100, 256, 64, 48 * KIB)
    assert occ.blocks_per_sm == 4 and occ.warps_per_sm == 32 and occ.fraction == 0.5
    assert occ.limited_by == ("registers", "shared memory") and occ.limiting == "registers"
    assert dict(occ.blocks_by_resource) == {"warps": 8, "registers": 4, "shared memory": 4,
                                            "blocks": 32, "barriers": 64}
    # the A100: the same registers, but 167936 // 50176 = 3 (164 KiB a SM)
    occ = blocks_per_sm(A100, 256, 64, 48 * KIB)
    assert occ.blocks_per_sm == 3 and occ.limited_by == ("shared memory",)
    assert "barriers" not in dict(occ.blocks_by_resource)  # not counted before sm_90


@pytest.mark.parametrize("target, threads, regs, shared, blocks, limited_by", [
    # warps: 1024 threads = 32 warps -> 64 // 32 = 2; 16 regs: 512 a warp ->
    # 16384 // 512 = 32 a partition -> 128 warps -> 4 blocks
    (H100, 1024, 16, 0, 2, ("warps",)),
    # the L40S has 48 warp slots: 48 // 32 = 1
    (L40S, 1024, 16, 0, 1, ("warps",)),
    # registers: 128 threads = 4 warps, 40 regs: 1280 a warp -> 16384 // 1280 = 12 a
    # partition -> 48 warps -> 12 blocks (warps: 16)
    (H100, 128, 40, 0, 12, ("registers",)),
    # registers by partition: 2 warps at 1280 -> 48 warps -> 24 blocks, where the whole
    # file (65536 // 1280 = 51 warps) would give 25
    (H100, 64, 40, 0, 24, ("registers",)),
    # registers rounded up: 33 regs x 32 = 1056 -> 1280 a warp, as 40 regs
    (H100, 64, 33, 0, 24, ("registers",)),
    # shared memory: 100 KiB + 1 KiB = 103424 (808 x 128) -> 233472 // 103424 = 2
    (H100, 128, 32, 100 * KIB, 2, ("shared memory",)),
    # shared memory rounded up: 45670 + 1024 = 46694 -> 46720 (365 x 128);
    # 233472 // 46720 = 4 (unrounded, 5 x 46694 = 233470 would fit 5)
    (H100, 32, 0, 45670, 4, ("shared memory",)),
    # the reservation counts: 58368 + 1024 = 59392 -> 233472 // 59392 = 3 (without it 4)
    (H100, 32, 0, 58368, 3, ("shared memory",)),
    # the largest block: 227 KiB + 1 KiB = 228 KiB = the whole SM
    (H100, 32, 0, 227 * KIB, 1, ("shared memory",)),
    # blocks: one warp, 16 regs, no shared memory: warps 64, registers 128,
    # shared 233472 // 1024 = 228 -> the 32 resident blocks
    (H100, 32, 16, 0, 32, ("blocks",)),
    (L40S, 32, 16, 0, 24, ("blocks",)),
    # odd thread counts are whole warps: 33 threads = 2 warps -> 64 // 2 = 32 (a tie)
    (H100, 33, 0, 0, 32, ("warps", "blocks")),
    (H100, 1000, 0, 0, 2, ("warps",)),  # 32 warps
])
def test_each_limiting_resource(target, threads, regs, shared, blocks, limited_by):
    occ = blocks_per_sm(target, threads, regs, shared)
    assert (occ.blocks_per_sm, occ.limited_by) == (blocks, limited_by)
    assert occ.warps_per_sm == blocks * -(-threads // 32)
    assert set(occ.limited_by) <= set(RESOURCES)


def test_barriers_bound_on_hopper_only():
    # sm_90: 2 x 32 = 64 barriers a SM; 4 a block -> 16
    occ = blocks_per_sm(H100, 32, 16, 0, barriers_per_block=4)
    assert (occ.blocks_per_sm, occ.limited_by) == (16, ("barriers",))
    assert blocks_per_sm(A100, 32, 16, 0, barriers_per_block=4).blocks_per_sm == 32
    # no barriers at all: nothing to count
    occ = blocks_per_sm(H100, 32, 16, 0, barriers_per_block=0)
    assert "barriers" not in dict(occ.blocks_by_resource)


def test_a_kernel_without_registers_or_shared_memory():
    occ = blocks_per_sm(H100, 128, 0, 0)
    assert "registers" not in dict(occ.blocks_by_resource)
    # shared memory still counts the reservation: 233472 // 1024
    assert dict(occ.blocks_by_resource)["shared memory"] == 228
    assert (occ.blocks_per_sm, occ.limited_by) == (16, ("warps",))


@pytest.mark.parametrize("args, message", [
    ((0, 32, 0), "threads_per_block must be at least 1"),
    ((1025, 32, 0), "1025 threads per block exceed the 1024"),
    ((32, 256, 0), "256 registers per thread exceed the 255"),
    ((32, -1, 0), "registers_per_thread must be at least 0"),
    ((32, 0, -1), "shared_bytes_per_block must be at least 0"),
    # 227 KiB + 1 byte rounds up past the 227 KiB a block may have
    ((32, 0, 227 * KIB + 1), "232449 bytes of shared memory per block exceed"),
    # 1024 threads at 65 regs: 2080 -> 2304 a warp x 32 warps = 73728 > 65536
    ((1024, 65, 0), "does not fit the 65536 registers"),
    # 9 warps at 224 regs: 7168 a warp; 9 x 7168 = 64512 would fit, but the hardware
    # counts the warps in multiples of the 4 partitions: 12 x 7168 = 86016 > 65536
    ((288, 224, 0), "does not fit the 65536 registers"),
])
def test_a_block_that_does_not_fit_is_an_error(args, message):
    with pytest.raises(ValueError, match=message):
        blocks_per_sm(H100, *args)


def test_the_largest_fitting_blocks():
    # 1024 threads at 64 regs: 2048 x 32 = 65536, exactly one block's registers
    assert blocks_per_sm(H100, 1024, 64, 0).blocks_per_sm == 1
    # 5 warps at 255 regs: 8160 -> 8192 a warp; 8 (5 rounded to 4s) x 8192 = 65536 fits;
    # 16384 // 8192 = 2 a partition -> 8 warps -> 1 block
    assert blocks_per_sm(H100, 160, 255, 0).blocks_per_sm == 1
    assert blocks_per_sm(A100, 32, 0, 163 * KIB).blocks_per_sm == 1


@pytest.mark.parametrize("bad", [1.0, True, "32", None])
def test_counts_must_be_ints(bad):
    with pytest.raises(TypeError, match="must be an int"):
        blocks_per_sm(H100, bad, 32, 0)
    with pytest.raises(TypeError, match="must be an int"):
        waves(H100, bad, 1)


@pytest.mark.parametrize("blocks, per_sm, count, last", [
    (264, 2, 1, 1.0),  # 132 SMs x 2 = 264 slots: exactly one wave
    (528, 2, 2, 1.0),  # exactly two
    (265, 2, 2, 1 / 264),  # one block spills into a second wave
    (1, 4, 1, 1 / 528),
    (1000, 3, 3, (1000 - 2 * 396) / 396),  # 396 slots: 792 in two waves, 208 left
])
def test_waves_exact_and_ragged(blocks, per_sm, count, last):
    w = waves(H100, blocks, per_sm)
    assert (w.waves, w.slots) == (count, 132 * per_sm)
    assert w.last_wave_utilization == pytest.approx(last)
    assert w.utilization == pytest.approx(blocks / (count * 132 * per_sm))


@pytest.mark.parametrize("blocks, per_sm", [(0, 1), (10, 0), (-1, 2)])
def test_waves_of_nothing_are_an_error(blocks, per_sm):
    with pytest.raises(ValueError, match="must be at least 1"):
        waves(H100, blocks, per_sm)


# ---------------------------------------------------------------- against the driver


@functools.cache
def example(name: str):
    return load_module(ROOT / "examples" / f"{name}.py")


def device_entry():
    name = driver.device_name()
    entry = gpu_for_device(name)
    if entry is None:
        pytest.skip(f"{name} is not in the GPU table")
    return entry


def drivers_blocks_per_sm(kernel, threads: int, dynamic_shared: int) -> int:
    drv = driver.bindings()
    return int(driver.call("cuOccupancyMaxActiveBlocksPerMultiprocessor",
                           drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                               kernel.handle, threads, dynamic_shared)))


# (example, kernel, constants): from few registers to many, without shared memory and
# with it (the quantized matmul's larger tiles take more than the 48 KiB a block has
# without opting in)
KERNELS = [
    ("vector_add", "vector_add", {}),
    ("matmul", "matmul", {}),
    ("matmul", "matmul", {"bm": 64, "bn": 64}),
    ("quantized_matmul", "quantized_matmul", {}),
    ("quantized_matmul", "quantized_matmul", {"bm": 64, "bn": 128, "bk": 64, "num_warps": 8}),
]
SHARED_SWEEP = [0, 1, 12304, 45670, 58368, 100 * KIB]


@pytest.mark.gpu
@pytest.mark.parametrize("name, kernel_name, constants", KERNELS,
                         ids=[f"{k}{c or ''}" for _, k, c in KERNELS])
def test_blocks_per_sm_equals_the_drivers(name, kernel_name, constants):
    entry = device_entry()
    kernel = tv.compile(getattr(example(name), kernel_name), **constants)
    registers = kernel.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS")
    static = kernel.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
    # let the occupancy query use up to the opt-in maximum (as a launch opts in)
    drv = driver.bindings()
    most = entry.shared_bytes_per_block - static
    driver.call("cuFuncSetAttribute", drv.cuFuncSetAttribute(
        kernel.handle,
        drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, most))
    # the kernel as it launches
    launched = blocks_per_sm(entry, kernel.num_threads, registers, static + kernel.shared_bytes)
    assert launched.blocks_per_sm == drivers_blocks_per_sm(
        kernel, kernel.num_threads, kernel.shared_bytes), launched
    # the same registers over block sizes up to the kernel's (its PTX's .maxntid) and
    # shared-memory sizes
    compared = 0
    for threads in range(32, kernel.num_threads + 1, 32):
        for dynamic in [*SHARED_SWEEP, most]:
            if dynamic > most:
                continue
            ours = blocks_per_sm(entry, threads, registers, static + dynamic)
            theirs = drivers_blocks_per_sm(kernel, threads, dynamic)
            assert ours.blocks_per_sm == theirs, (threads, registers, static + dynamic, ours)
            compared += 1
    assert compared >= 4 * len(SHARED_SWEEP)
