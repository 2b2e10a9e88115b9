"""The lowering of tile_post / tile_wait (backend/llvm/lowering/tile_sync.py): the PTX
sequence cuSync's semaphores need, in order, for sm_80 and sm_90a, accepted by ptxas,
and no non-coherent load anywhere in a kernel that waits. On the GPU: a producer and a
consumer on two streams, the consumer launched first on the higher-priority stream,
give the serialized result on every repetition, under a watchdog."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tilevm.backend.ptxas import check_ptx
from tilevm.tune.variants import compiled_ptx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "vm"))
from test_tile_sync import consumer, producer  # noqa: E402

SYNC = re.compile(r"\b(bar\.sync|fence\.acq_rel\.gpu|red\.relaxed\.gpu\.global\.add\.s32|"
                  r"ld\.acquire\.gpu\.global\.s32|nanosleep\.u32|ld\.global\.nc)\b")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_post_is_barrier_fence_release_and_a_wait_acquire_spin_then_barrier(arch):
    post = compiled_ptx(producer.specialize(), arch)
    assert SYNC.findall(post) == ["bar.sync", "fence.acq_rel.gpu",
                                  "red.relaxed.gpu.global.add.s32"]
    wait = compiled_ptx(consumer.specialize(), arch)
    found = SYNC.findall(wait)
    assert "ld.global.nc" not in found
    # two waits: each acquire-loads (LLVM rotates the loop: one load before it, one in
    # it), sleeps between tries, and ends in a barrier before any tile is read
    assert found.count("bar.sync") == 2 and found.count("nanosleep.u32") == 2
    first_barrier = found.index("bar.sync")
    assert set(found[:first_barrier]) == {"ld.acquire.gpu.global.s32", "nanosleep.u32"}
    tile_reads = [m.start() for m in re.finditer(r"\bld\.global\.", wait)]
    assert tile_reads and min(tile_reads) > wait.index("bar.sync")  # none before the wait
    for ptx in (post, wait):
        check_ptx(ptx, arch)


@pytest.mark.parametrize("arch, early", [("sm_80", False), ("sm_90a", True)])
def test_a_kernel_that_waits_on_tiles_may_start_before_its_producer_ends(arch, early):
    """On sm_90 the consumer is launched with programmatic stream serialization (its
    blocks may start once every producer block ran `launch_dependents` or finished);
    its semaphores, not `griddepcontrol.wait`, order its reads. Before sm_90, never."""
    from tilevm.backend.launch import build_artifact

    def dependent(program):
        return build_artifact(program, arch).extra["signature"]["dependent_launch"]

    assert dependent(consumer.specialize()) is early
    assert dependent(producer.specialize()) is False
    assert "griddepcontrol.wait" not in compiled_ptx(consumer.specialize(), arch)


PAIR_ON_TWO_STREAMS = r'''
import sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from test_tile_sync import producer, consumer, expected_output, BLOCK
from tilevm.backend.cuda import driver
from tilevm.backend.cuda.device_array import DeviceArray
from tilevm.backend.launch import compiled_kernel

driver.ensure_context()
drv = driver.bindings()
low, high = driver.call("range", drv.cuCtxGetStreamPriorityRange())
streams = [driver.call("stream", drv.cuStreamCreateWithPriority(1, p)) for p in (high, low)]
same_stream = sys.argv[3] == "pdl"  # the consumer a dependent launch after the producer
make = compiled_kernel(producer.specialize(early=same_stream))
use = compiled_kernel(consumer.specialize())
rng = np.random.default_rng(0)
tiles = 64
x = rng.standard_normal(tiles * BLOCK).astype(np.float32)
xd, hd = DeviceArray.from_numpy(x), DeviceArray.zeros(x.size, "f32")
sem, out = DeviceArray.zeros(tiles, "int32"), DeviceArray.zeros(x.size, "f32")
want = expected_output(x)
for generation in range(1, int(sys.argv[2]) + 1):
    if same_stream:  # a prepared launch: with the dependent-launch attribute
        consumer_launch = use.prepare(hd, sem, out, x.size, generation)
        assert consumer_launch.dependent
        make(xd, hd, sem, x.size, stream=streams[1])
        consumer_launch.launch(int(streams[1]), hd.ptr, sem.ptr, out.ptr)
    else:
        use(hd, sem, out, x.size, generation, stream=streams[0])  # the consumer first
        make(xd, hd, sem, x.size, stream=streams[1])
    begin = time.monotonic()
    while True:
        done = [drv.cuStreamQuery(s)[0] == drv.CUresult.CUDA_SUCCESS for s in streams]
        if all(done):
            break
        if time.monotonic() - begin > 1.0:
            print("WATCHDOG", generation); sys.exit(3)
    assert np.array_equal(out.to_numpy(), want), generation
print("OK")
'''


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["two-streams", "pdl"])
def test_gpu_a_consumer_waits_for_its_tiles(mode):
    """two-streams: the consumer launched first, on the higher-priority stream; pdl: on
    one stream, the consumer a dependent launch right after the producer (which lets it
    start at entry). 200 calls each, the semaphores never reset, a 1 s watchdog."""
    proc = subprocess.run([sys.executable, "-c", PAIR_ON_TWO_STREAMS, str(HERE.parent / "vm"),
                           "200", mode], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stdout + proc.stderr
