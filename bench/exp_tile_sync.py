"""Experiment (issue 47 acceptance): the tile-synchronized producer/consumer pair of
tests/vm/test_tile_sync.py on the GPU.
1. bitwise equality with serialized runs over SHAPES random ragged shapes x REPS calls
   (generations, semaphores never reset), in two modes: two streams (consumer first, on
   the higher-priority stream) and a dependent launch on one stream; a 1 s watchdog per
   call.
2. overhead on a one-wave copy -> copy pair: the pair with TileSync against the same two
   copies without sync instructions, serialized on one stream (CUDA events, median of
   200 after warm-up).
Prints JSON lines."""
import json, statistics, sys, time
import numpy as np
sys.path.insert(0, "tests/vm")
from test_tile_sync import producer, consumer, BLOCK
from tilevm.vm import lang as tv
from tilevm.backend.cuda import driver
from tilevm.backend.cuda.device_array import DeviceArray
from tilevm.backend.launch import compiled_kernel

SHAPES, REPS = int(sys.argv[1]), int(sys.argv[2])
driver.ensure_context(); drv = driver.bindings()
low, high = driver.call("range", drv.cuCtxGetStreamPriorityRange())
streams = [driver.call("stream", drv.cuStreamCreateWithPriority(1, p)) for p in (high, low)]

def wait_all(limit=1.0):
    begin = time.monotonic()
    while not all(drv.cuStreamQuery(s)[0] == drv.CUresult.CUDA_SUCCESS for s in streams):
        if time.monotonic() - begin > limit:
            return False
    return True

rng = np.random.default_rng(0)
for mode in ("two-streams", "pdl"):
    make = compiled_kernel(producer.specialize(early=mode == "pdl"))
    use = compiled_kernel(consumer.specialize())
    mismatches = fired = launches = 0
    t0 = time.time()
    for shape in range(SHAPES):
        n = int(rng.integers(1, 2048)) * BLOCK - int(rng.integers(0, BLOCK))
        x = rng.standard_normal(n).astype(np.float32)
        tiles = -(-n // BLOCK)
        h_ref = (x * 2 + 1).astype(np.float32)
        nxt = np.minimum(np.arange(n) // BLOCK + 1, tiles - 1)
        idx = nxt * BLOCK + np.arange(n) % BLOCK
        want = h_ref + np.where(idx < n, h_ref[np.minimum(idx, n - 1)], 0).astype(np.float32)
        xd, hd = DeviceArray.from_numpy(x), DeviceArray.zeros(n, "f32")
        sem, out = DeviceArray.zeros(tiles, "int32"), DeviceArray.zeros(n, "f32")
        for generation in range(1, REPS + 1):
            if mode == "pdl":
                c = use.prepare(hd, sem, out, n, generation)
                make(xd, hd, sem, n, stream=streams[1])
                c.launch(int(streams[1]), hd.ptr, sem.ptr, out.ptr)
            else:
                use(hd, sem, out, n, generation, stream=streams[0])
                make(xd, hd, sem, n, stream=streams[1])
            launches += 1
            if not wait_all():
                fired += 1
                print(json.dumps({"mode": mode, "watchdog": shape, "generation": generation}), flush=True)
                sys.exit(3)
            if generation in (1, REPS) or generation % 10 == 0:
                mismatches += not np.array_equal(out.to_numpy(), want)
    print(json.dumps({"mode": mode, "shapes": SHAPES, "reps": REPS, "launches": launches,
                      "mismatches": mismatches, "watchdog_fired": fired, "wall_s": round(time.time() - t0, 1)}), flush=True)

# overhead: one-wave copy -> copy
@tv.kernel(num_warps=4)
def copy_post(src: tv.ptr(tv.f32, const=True), dst: tv.ptr(tv.f32), sem: tv.ptr(tv.int32), n: tv.int32, *, block: int, sync: bool):
    tv.grid(tv.cdiv(n, block))
    t = tv.block_idx(0)
    if sync:
        tv.launch_dependents()
    v = tv.load_global(tv.global_view(src, [n]), [t * block], [block])
    tv.store_global(tv.global_view(dst, [n]), v, [t * block])
    if sync:
        tv.tile_post(tv.global_view(sem, [tv.cdiv(n, block)]), [t], 1)

@tv.kernel(num_warps=4)
def copy_wait(src: tv.ptr(tv.f32), dst: tv.ptr(tv.f32), sem: tv.ptr(tv.int32), n: tv.int32, generation: tv.int32, *, block: int, sync: bool):
    tv.grid(tv.cdiv(n, block))
    t = tv.block_idx(0)
    if sync:
        tv.tile_wait(tv.global_view(sem, [tv.cdiv(n, block)]), [t], generation)
    v = tv.load_global(tv.global_view(src, [n]), [t * block], [block])
    tv.store_global(tv.global_view(dst, [n]), v, [t * block])

block = 4096
for waves in (1,):
    n = 132 * 8 * block * waves  # blocks of 128 threads: 8 resident per SM (16 KB each)
    a, b, c = (DeviceArray.zeros(n, "f32") for _ in range(3))
    sem = DeviceArray.zeros(-(-n // block), "int32")
    res = {}
    for sync in (False, True):
        p = compiled_kernel(copy_post.specialize(block=block, sync=sync))
        q = compiled_kernel(copy_wait.specialize(block=block, sync=sync))
        times, gen = [], 0
        for rep in range(230):
            gen += 1
            prep = q.prepare(b, c, sem, n, gen)
            start, end = (driver.call("ev", drv.cuEventCreate(0)) for _ in range(2))
            drv.cuEventRecord(start, streams[1])
            p(a, b, sem, n, stream=streams[1])
            prep.launch(int(streams[1]), b.ptr, c.ptr, sem.ptr)
            drv.cuEventRecord(end, streams[1])
            drv.cuEventSynchronize(end)
            if rep >= 30:
                times.append(driver.call("t", drv.cuEventElapsedTime(start, end)) * 1e3)
        res["sync" if sync else "serialized"] = statistics.median(times)
    print(json.dumps({"copy_copy_us": res, "overhead": res["sync"] / res["serialized"] - 1, "n": n, "block": block}), flush=True)

# 3. the MLP pair (kernels.mlp_sync): SHAPES random shapes (ragged M) x REPS calls, bitwise
#    synced (dependent launch) == serialized (plain launch), both policies, 1 s watchdog
from tilevm.kernels.mlp_sync import interleave_gate_up, mlp_kernels, semaphores
from tilevm.kernels.weight_format import FRAGMENTS, pack_weights
G, BNQ = 128, 128
make_k, use_k = mlp_kernels("f16")
for policy in ("row", "tile"):
    cfg = dict(wdtype=tv.int4, group_size=G, bm=128, bk=64, num_warps=4, stages=4, lead=2, prefetch=2, policy=policy)
    make = compiled_kernel(make_k.specialize(**cfg)); use = compiled_kernel(use_k.specialize(producer_bn=BNQ, **cfg))
    bad = 0; t0 = time.time(); calls = 0
    for shape in range(SHAPES):
        M = int(rng.integers(1, 700)); H = 128 * int(rng.integers(2, 12)); F = 128 * int(rng.integers(1, 12))
        codes = interleave_gate_up(rng.integers(0, 16, (H, F)), rng.integers(0, 16, (H, F)), BNQ)
        dev = lambda a: DeviceArray.from_numpy(np.ascontiguousarray(a))
        wgu = dev(pack_weights(codes.astype(np.uint8), "int4", FRAGMENTS)); sgu = dev((rng.uniform(0.5, 2, (H // G, 2 * F)) / 64).astype(np.float16))
        wdn = dev(pack_weights(rng.integers(0, 16, (F, H)).astype(np.uint8), "int4", FRAGMENTS)); sdn = dev((rng.uniform(0.5, 2, (F // G, H)) / 64).astype(np.float16))
        x = dev(rng.uniform(-1, 1, (M, H)).astype(np.float16))
        h, y = DeviceArray.zeros((M, F), "f16"), DeviceArray.zeros((M, H), "f16")
        sem = DeviceArray.zeros(semaphores(policy, M, F, 128, BNQ), "int32")
        first = None
        for gen in range(1, REPS + 1):
            make(x, wgu, sgu, sgu, h, sem, M, 2 * F, H, stream=streams[1])
            if gen % 2:
                use(h, wdn, sdn, sdn, y, sem, M, H, F, gen, stream=streams[1])
            else:
                use.prepare(h, wdn, sdn, sdn, y, sem, M, H, F, gen).launch(int(streams[1]), h.ptr, wdn.ptr, sdn.ptr, sdn.ptr, y.ptr, sem.ptr)
            calls += 1
            if not wait_all():
                print(json.dumps({"mlp": policy, "watchdog": [M, H, F], "generation": gen}), flush=True); sys.exit(3)
            if gen in (1, 2) or gen % 10 == 0:
                out = y.to_numpy()
                if first is None: first = out.copy()
                bad += not np.array_equal(out, first)
    print(json.dumps({"mlp": policy, "shapes": SHAPES, "reps": REPS, "calls": calls, "mismatches": bad, "wall_s": round(time.time() - t0, 1)}), flush=True)
