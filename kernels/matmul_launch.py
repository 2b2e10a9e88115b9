"""A quantized-matmul call's launches (`kernels.matmul`'s lower layer): the program and the
loaded kernel a schedule runs (`schedule_program`, `loaded_kernel`; the
dequantize-then-multiply pair's two), their launches prepared once for a call's shapes
and stream (`plan_call` -> `Plan`, run by `run_plan` with x's and y's addresses),
split-K's workspace and tile counters per stream, the schedules' programs built at once
in worker processes (`prebuild_schedules`), and the device facts both the call and the
tuner read (`is_hopper`, `sm_count`, `gpu_name`, `raw_stream`).
"""

from __future__ import annotations

import functools
import json
from typing import Any, NamedTuple

from tilevm.backend.launch import compiled_kernel
from tilevm.backend.prebuild import prebuild
from tilevm.kernels.qmm import qmm_kernel, splitk_sizes
from tilevm.kernels.qmm_dequant import dequantize_kernel, wt_matmul_kernel
from tilevm.kernels.qmm_staged import qmm_staged_kernel
from tilevm.kernels.qmm_streamk import qmm_streamk_kernel, streamk_slots, streamk_units
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.schedule import Schedule, k_tile
from tilevm.kernels.weights import QuantizedWeight
from tilevm.tune.variants import ordered_kernel


class Plan(NamedTuple):
    """A call's launches, prepared (`Kernel.prepare`): everything but x's and y's
    addresses (and the dequantized W^T's) fixed for one key of `quantized_matmul`."""

    out_shape: tuple[int, ...]
    dtype: Any  # x's and y's torch dtype
    device: Any  # their torch device
    qmm: Any  # the PreparedLaunch of the matmul
    weights: tuple[int, ...]  # addresses of packed, scales and zero points
    tail: tuple[int, ...]  # split-K's workspace and counters (after y)
    dequantize: Any  # the dequantize-then-multiply pair's first launch, or None
    wt_shape: tuple[int, int]  # (Np, K): W^T, dequantized (that pair only)
    keep: tuple[Any, ...]  # tensors the addresses point into, kept alive


def run_plan(plan: Plan, x_address: int, stream: int, y: Any = None) -> Any:
    """Launch a plan's kernels for x at `x_address` into `y` (a new tensor if None)."""
    import torch

    if y is None:
        y = torch.empty(plan.out_shape, dtype=plan.dtype, device=plan.device)
    if plan.dequantize is None:
        plan.qmm.submit(stream, (x_address, *plan.weights, y.data_ptr(), *plan.tail))
        return y
    # W^T, dequantized: a workspace of the call (torch's caching allocator keeps the
    # memory for the next one).
    wt = torch.empty(plan.wt_shape, dtype=plan.dtype, device=plan.device)
    plan.dequantize.submit(stream, (*plan.weights, wt.data_ptr()))
    plan.qmm.submit(stream, (x_address, wt.data_ptr(), y.data_ptr()))
    return y


def plan_call(x: Any, qw: QuantizedWeight, y: Any, s: Schedule, stream: int,
              shape: tuple[int, ...], order: dict[str, Any] | None = None,
              dependent: bool | None = False) -> Plan:
    """The prepared launches of schedule `s` for x[M, K] (contiguous) and y[M, N] on
    `stream`, for calls whose result has `shape`: checked here once, as a call of each
    kernel checks its arguments. `order`: the matmul kernel's PTX order (a tuning table
    entry's); `dependent`: None launches the kernels as they declare (dependent launches
    on sm_90), False as ordinary ones (`Kernel.prepare`)."""
    import torch

    K, N = qw.shape
    M = x.shape[0]
    zeros = qw.zeros if qw.zeros is not None else qw.scales  # unread without zero points
    weights = (qw.packed, qw.scales, zeros)
    addresses = tuple(w.data_ptr() for w in weights)
    if s.dequant:
        wt = torch.empty(qw.scales.shape[1], K, dtype=x.dtype, device=x.device)
        dequantize = dequantizer(qw).prepare(*weights, wt, N, K, dependent=dependent)
        qmm = loaded_kernel(qw, s, N).prepare(x, wt, y, M, N, K, dependent=dependent)
        return Plan(shape, x.dtype, x.device, qmm, addresses, (), dequantize,
                    tuple(wt.shape), weights)
    if not s.splits_k_kernel:
        qmm = loaded_kernel(qw, s, N, order).prepare(x, *weights, y, M, N, K,
                                                     dependent=dependent)
        return Plan(shape, x.dtype, x.device, qmm, addresses, (), None, (0, 0), weights)
    if s.stream_k:  # every tile's units shared out evenly by `stream_k` blocks per SM
        tiles, units = streamk_units(M, N, K, s.bm, s.block_columns, s.stages * s.bk)
        blocks = min(sm_count(x.device.index) * s.stream_k, tiles * units)
        slots = streamk_slots(tiles, units, blocks)
        ws, counters = splitk_buffers(x.device, stream,
                                      slots * tiles * s.bm * s.block_columns, tiles)
        qmm = loaded_kernel(qw, s, N, order).prepare(x, *weights, y, ws, counters, M, N, K,
                                                     blocks, slots, dependent=dependent)
    else:  # (the kernels that split K, whatever their split: unsplit, they read neither)
        sizes = splitk_sizes(M, N, s.bm, s.block_columns, s.split_k) \
            if s.split_k > 1 and not s.split_cluster else (1, 1)
        ws, counters = splitk_buffers(x.device, stream, *sizes)
        qmm = loaded_kernel(qw, s, N, order).prepare(x, *weights, y, ws, counters, M, N, K,
                                                     dependent=dependent)
    return Plan(shape, x.dtype, x.device, qmm, addresses,
                (ws.data_ptr(), counters.data_ptr()), None, (0, 0), (*weights, ws, counters))


@functools.cache
def tensor_type() -> type:
    import torch

    return torch.Tensor


@functools.cache
def _stream_reader() -> Any:
    import torch

    return torch._C._cuda_getCurrentRawStream


def raw_stream(device: int) -> int:
    """PyTorch's current stream on `device`, as a raw handle."""
    return _stream_reader()(device)


# The loaded kernels of this process, by what selects them (cheap keys: every call looks).
_kernels: dict[tuple[Any, ...], Any] = {}


def loaded_kernel(qw: QuantizedWeight, s: Schedule, N: int,
                  order: dict[str, Any] | None = None) -> Any:
    """The loaded kernel that schedule `s` runs for these weights and N (for the
    dequantize-then-multiply pair, its matmul), in the PTX `order` a search stored with
    the schedule (a tuning table entry's) if given."""
    wide = tuple(wide_stores(s, N).items())
    key = (qw.scale_dtype.name, s, wide) if s.dequant else \
        (qw.scale_dtype.name, qw.dtype, qw.group_size, qw.zeros is not None, s, wide)
    key += (json.dumps(order, sort_keys=True) if order else None,)
    loaded = _kernels.get(key)
    if loaded is None:
        loaded = _kernels[key] = ordered_kernel(schedule_program(qw, s, N), order)
    return loaded


def schedule_program(qw: QuantizedWeight, s: Schedule, N: int) -> Any:
    """The program schedule `s` runs for these weights and N (for the
    dequantize-then-multiply pair, its matmul; `loaded_kernel` loads it)."""
    wide = wide_stores(s, N)
    kernel = schedule_kernel(s, qw.scale_dtype.name)
    if s.dequant:  # the matmul of the dequantized weights: by activation type only
        return kernel.specialize(**s.constants(), **wide)
    return kernel.specialize(wdtype=qw.dtype, group_size=qw.group_size,
                             has_zeros=qw.zeros is not None, **s.constants(), **wide)


def wide_stores(s: Schedule, N: int) -> dict[str, bool]:
    """The Hopper kernels' `wide_stores` constant: y goes through shared memory, 16 bytes
    a thread, where its rows are 16-byte aligned (`wgmma_epilogue.store_transposed`)."""
    return {"wide_stores": N % 8 == 0} if s.wgmma and not s.stream_k else {}


def dequantizer(qw: QuantizedWeight) -> Any:
    """The loaded `kernels.qmm_dequant.dequantize_kernel` for these weights."""
    key = ("dequantize", qw.scale_dtype.name, qw.dtype, qw.group_size, qw.zeros is not None)
    if key not in _kernels:
        _kernels[key] = compiled_kernel(dequantizer_program(qw))
    return _kernels[key]


def dequantizer_program(qw: QuantizedWeight) -> Any:
    return dequantize_kernel(qw.scale_dtype.name).specialize(
        wdtype=qw.dtype, group_size=qw.group_size, has_zeros=qw.zeros is not None,
        bk=k_tile(qw.group_size))


def schedule_launches(qw: QuantizedWeight, s: Schedule, N: int) -> list[tuple[Any, Any]]:
    """(program, loaded kernel) of each launch a call with schedule `s` makes."""
    qmm = (schedule_program(qw, s, N), loaded_kernel(qw, s, N))
    return [(dequantizer_program(qw), dequantizer(qw)), qmm] if s.dequant else [qmm]


def schedule_kernel(s: Schedule, act: str = "f16") -> Any:
    """The kernel factory's kernel that schedule `s` selects, for activations `act`."""
    if s.staged:
        return qmm_staged_kernel(act)
    if s.dequant:
        return wt_matmul_kernel(act)  # (after `dequantize_kernel`: `plan_call`)
    if s.stream_k:
        return qmm_streamk_kernel(act)
    if s.wgmma:
        return qmm_wgmma_shared_kernel(act) if s.shared_weights else qmm_wgmma_kernel(act)
    return qmm_kernel(act)


# Split-K's workspace and tile counters, per (device, stream), grown as needed: the
# kernels of one stream run one after another, and each leaves its counters at zero.
_splitk: dict[tuple[Any, int], tuple[Any, Any]] = {}


def splitk_buffers(device: Any, stream: int, floats: int, tiles: int) -> tuple[Any, Any]:
    """The stream's workspace of at least `floats` f32 and `tiles` tile counters (a
    kernel that does not split reads neither: any pointers do)."""
    key = (device, stream)
    ws, counters = _splitk.get(key, (None, None))
    if ws is None or ws.numel() < floats or counters.numel() < tiles:
        ws, counters = _splitk_grow(key, floats, tiles)
    return ws, counters


def _splitk_grow(key: tuple[Any, int], floats: int, tiles: int) -> tuple[Any, Any]:
    import torch

    old = _splitk.get(key)
    if old is not None:  # never shrink: the largest problem so far serves every smaller one
        floats, tiles = max(floats, old[0].numel()), max(tiles, old[1].numel())
    _splitk[key] = (torch.empty(floats, dtype=torch.float32, device=key[0]),
                    torch.zeros(tiles, dtype=torch.int32, device=key[0]))
    return _splitk[key]


def prebuild_schedules(qw: QuantizedWeight, schedules: list[Schedule], N: int) -> None:
    """Build the programs of these schedules at once, in worker processes
    (`backend.prebuild`), so that loading each is a cache hit."""
    programs = [schedule_program(qw, s, N) for s in schedules]
    if any(s.dequant for s in schedules):
        programs.append(dequantizer_program(qw))
    prebuild(programs)


@functools.cache
def gpu_name(device_index: int) -> str:
    import torch

    return torch.cuda.get_device_name(device_index).replace("|", "/")


@functools.cache
def sm_count(device_index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.cache
def _capability(device_index: int) -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(device_index)


def is_hopper(device: Any) -> bool:
    """Whether the device runs sm_90a code (wgmma): compute capability 9.0, for which
    kernels are compiled as sm_90a (`backend.analysis.target.native_arch`)."""
    return _capability(device.index if device.index is not None else 0) == (9, 0)
