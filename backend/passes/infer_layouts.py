"""Pass `infer_layouts`: give every register tensor a `RegisterLayout`.

Expects: a verified program. Guarantees: every register tensor (definition and uses) has
a layout spread over exactly the block's threads; layouts the user gave (in a type or
by `annotate_layout`) are kept.

Rules, in program order (one pass suffices: a tensor's layout depends only on earlier
ones): an annotation wins; `cast`, `elementwise` and `where` take the layout of their
first operand of the same shape; `reduce` takes its source's layout reduced over the
dimension (its spatial modes become replication); anything else (loads, `full`, `dot`)
gets `default_layout`, which gives each thread 16-byte vectors along the last dimension
when the shape allows, so loads and stores can be vectorized.

Not yet: backward propagation (choosing a load's layout from its consumers, e.g. the
mma fragments of a `dot`) and inserting layout conversions; tensors whose producers
disagree are reported by codegen.
"""

from __future__ import annotations

import math

from tilevm.dtypes import DataType
from tilevm.ir import instructions as ins
from tilevm.ir.stmt import Program
from tilevm.ir.transform import instructions, map_tensors
from tilevm.ir.types import MemorySpace, Tensor
from tilevm.layouts import RegisterLayout, local, replicated

_VECTOR_BYTES = 16


def default_layout(shape: tuple[int, ...], dtype: DataType, num_threads: int) -> RegisterLayout:
    """Threads row-major over the tile, each holding a vector of up to 16 bytes along the
    last dimension, repeated (local) when the tile is larger than the block and
    replicated when it is smaller. Narrower vectors are preferred to idle threads."""
    ndim = len(shape)
    widest = math.gcd(shape[-1], max(1, _VECTOR_BYTES * 8 // max(dtype.bits, 1)))
    best = None
    for vector in sorted(d for d in range(1, widest + 1) if widest % d == 0)[::-1]:
        rest = list(shape[:-1]) + [shape[-1] // vector]
        threads, free = [1] * ndim, num_threads
        for d in reversed(range(ndim)):  # the last dimension first: coalesced accesses
            threads[d] = math.gcd(free, rest[d])
            free //= threads[d]
        if best is None or free < best[0]:
            best = (free, vector, threads, rest)
        if free == 1:
            break
    free, vector, threads, rest = best
    outer = [r // t for r, t in zip(rest, threads)]
    layout = local(*outer).spatial(*threads).local(*([1] * (ndim - 1) + [vector]))
    return replicated(free, ndim=ndim) * layout if free > 1 else layout


def infer_layouts(program: Program) -> Program:
    chosen: dict[str, RegisterLayout] = {}
    for inst in instructions(program.body):
        if isinstance(inst, ins.AnnotateLayout) and inst.tensor.space is MemorySpace.REGISTER:
            chosen.setdefault(inst.tensor.name, inst.layout)
    for inst in instructions(program.body):
        out = inst.output
        if out is None or out.space is not MemorySpace.REGISTER or out.name in chosen:
            continue
        chosen[out.name] = out.layout or _rule(inst, out, chosen, program.num_threads)

    def with_layout(t: Tensor) -> Tensor:
        if t.space is MemorySpace.REGISTER and t.layout is None and t.name in chosen:
            return Tensor(t.name, t.type.with_layout(chosen[t.name]))
        return t

    return map_tensors(program, with_layout)


def _rule(inst: ins.Instruction, out: Tensor, chosen: dict[str, RegisterLayout],
          num_threads: int) -> RegisterLayout:
    shape = out.type.static_shape
    if isinstance(inst, (ins.Cast, ins.Elementwise, ins.Where)):
        for t in inst.input_tensors():
            if t.type.shape == out.type.shape and t.name in chosen:
                return chosen[t.name]
    if isinstance(inst, ins.Reduce) and inst.src.name in chosen:
        return chosen[inst.src.name].reduce(inst.dim, keepdims=inst.keepdim)
    return default_layout(shape, out.dtype, num_threads)


