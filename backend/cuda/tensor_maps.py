"""Encoding a kernel's TMA tensor maps (`cuTensorMapEncodeTiled`) for a launch's arguments.

A kernel that copies with the tensor memory accelerator takes, after its own
parameters, one `CUtensorMap` per `TensorMapSpec` of its signature: the view it
describes, evaluated over the launch's scalar arguments and pointed at its buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilevm.backend.analysis.signature import Signature
from tilevm.backend.cuda import driver
from tilevm.backend.cuda.errors import ArgumentValueError
from tilevm.backend.cuda.validate import BoundPointer, BoundScalar, scalar_value

__all__ = ["encode_tensor_maps", "ZERO_BLOCK_BYTES"]

_TMA_TYPES = {8: "UINT8", 16: "FLOAT16", 32: "FLOAT32", 64: "FLOAT64"}


def encode_tensor_maps(sig: Signature, bound: Sequence[BoundPointer | BoundScalar]) -> list:
    """The `CUtensorMap` of each of the kernel's tensor-map parameters for these
    arguments: the view's address, extents and byte strides evaluated over the scalar
    arguments (an empty view: one element of a zeroed buffer). A view TMA cannot
    describe (an address or stride not a multiple of 16 bytes) is an
    `ArgumentValueError` naming it, before the launch."""
    drv = driver.bindings()
    env = {b.param.name: b.value for b in bound if isinstance(b, BoundScalar)}
    pointers = {b.param.name: b for b in bound if isinstance(b, BoundPointer)}
    views = {v.name: v for v in sig.views}
    maps = []
    for spec in sig.tensor_maps:
        view = views[spec.view]
        elem = view.dtype.bits // 8
        offset = int(scalar_value(view.offset, env))
        shape = [int(scalar_value(e, env)) for e in view.shape]
        strides = [int(scalar_value(e, env)) for e in view.strides]
        address = pointers[view.param].address + offset * elem
        dims = [shape[d] for d in spec.dims]
        gstrides = [strides[d] * elem for d in spec.dims[1:]]
        if min(dims) < 1:  # nothing to read: every copy from it is zero fill. A map
            # cannot be empty, so it describes one element of a zeroed buffer instead
            address, dims, gstrides = _zero_block(), [1] * len(dims), [16] * len(gstrides)
        if address % 16 or any(st % 16 for st in gstrides):
            raise ArgumentValueError(
                f"kernel {sig.name}: the view of {view.param} ({spec.view}) starts at "
                f"{address:#x} with byte strides {gstrides}: the tensor memory "
                f"accelerator needs 16-byte multiples")
        name = "BFLOAT16" if view.dtype.name == "bf16" else _TMA_TYPES[view.dtype.bits]
        dtype = getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{name}")
        swizzle = getattr(drv.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_NONE"
                          if not spec.swizzle else f"CU_TENSOR_MAP_SWIZZLE_{spec.swizzle}B")
        err, tmap = drv.cuTensorMapEncodeTiled(
            dtype, len(dims), address, [drv.cuuint64_t(d) for d in dims],
            [drv.cuuint64_t(st) for st in gstrides], [drv.cuuint32_t(b) for b in spec.box],
            [drv.cuuint32_t(1)] * len(dims),
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        driver.call(f"cuTensorMapEncodeTiled({sig.name}: {spec.view})", (err,))
        maps.append(tmap)
    return maps


_zero_blocks: dict[int, int] = {}  # context handle -> device address (`_zero_block`)
ZERO_BLOCK_BYTES = 256


def _zero_block() -> int:
    """A zeroed device buffer of the current context, allocated once: what the tensor map
    of an empty view points at (its one element, 0, and zero fill elsewhere)."""
    drv = driver.bindings()
    ctx = int(driver.ensure_context().handle)
    if ctx not in _zero_blocks:
        address = int(driver.call(f"cuMemAlloc({ZERO_BLOCK_BYTES})",
                                  drv.cuMemAlloc(ZERO_BLOCK_BYTES)))
        driver.call("cuMemsetD8", drv.cuMemsetD8(address, 0, ZERO_BLOCK_BYTES))
        _zero_blocks[ctx] = address
    return _zero_blocks[ctx]
