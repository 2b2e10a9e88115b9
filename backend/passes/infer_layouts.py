"""Pass `infer_layouts`: give every register tensor a `RegisterLayout`.

Expects: a verified program. Guarantees: every register tensor (definition and uses) has
a layout spread over exactly the block's threads; layouts the user gave (in a type or
by `annotate_layout`) are kept.

First, backward: the operands a, b, c of a `dot` whose shapes and dtype fit a
tensor-core instruction (`analysis.fragments.MMA_INSTRUCTIONS`) ask for the mma fragment
tilings of `dot_layouts` (a tensor feeding several `dot`s gets the request of the first, in program
order); a `dot` whose b is a shared tile asks for `wgmma_layouts` for a and c. A
request passes back through `cast`, `elementwise` and `where` to their
operands of the same shape, and through `assign` between its two tensors (so the tile a
loop carries as c, and its initial `full`, get the C tiling). Tensors whose layout the
user gave (type or annotation) are not asked.

Then forward, in program order (one pass suffices: a tensor's layout depends only on
earlier ones): an annotation wins; a tensor produced by a load, `full`, `arange`,
`cast`, `elementwise` or `where` takes the layout its consumers asked for, if any;
otherwise `cast`, `elementwise` and `where` take the layout of their first operand of
the same shape; `reduce` takes its source's layout reduced over the dimension (its
spatial modes become replication); `dot` takes its accumulator's layout; anything else
(loads, `full`, `arange`) gets `default_layout`, which gives each thread 16-byte vectors
along the last dimension when the shape allows, so loads and stores can be vectorized.

Broadcast operands: after the forward pass, an unannotated operand of an `elementwise`
or `where` that is broadcast (a `[1, n]` scale row into a `[k, n]` tile, a `[rows, 1]`
row maximum), produced by a load, `full` or `arange` (or computed pointwise from an
`arange`, `arange(...) + q0`: each tensor of the chain is asked alike), and not held by the
threads that need it (`broadcast_compatible`, the rule of `KernelContext.broadcast_map`),
is asked for the consumer's layout reduced over the broadcast dims (`broadcast_layout`:
replicated where the consumer spreads threads), and the forward pass runs again (to a
fixpoint).

Layouts that still disagree (a `dot` operand whose layout is fixed otherwise, an
operand produced by a `reduce` or an annotation, ...) are resolved by the next pass,
`convert_layouts`, which inserts conversions through shared memory.
"""

from __future__ import annotations

import math

import numpy as np

from tilevm.backend.analysis.fragments import dot_layouts, wgmma_layouts
from tilevm.backend.passes.context import DEFAULT_CONTEXT, PassContext
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


def infer_layouts(program: Program, context: PassContext = DEFAULT_CONTEXT) -> Program:
    chosen: dict[str, RegisterLayout] = {}
    insts = instructions(program.body)
    for inst in insts:
        if isinstance(inst, ins.AnnotateLayout) and inst.tensor.space is MemorySpace.REGISTER:
            chosen.setdefault(inst.tensor.name, inst.layout)
    annotated = dict(chosen)
    wanted = _requests(insts, annotated, program.num_threads)
    for _ in range(8):  # broadcast requests depend on the consumers' layouts
        chosen = dict(annotated)
        for inst in insts:
            out = inst.output
            if out is None or out.space is not MemorySpace.REGISTER or out.name in chosen:
                continue
            if out.layout is None and out.name in wanted and isinstance(inst, _FLEXIBLE):
                chosen[out.name] = wanted[out.name]
                continue
            chosen[out.name] = out.layout or _rule(inst, out, chosen, program.num_threads)
        if not _broadcast_requests(insts, annotated, chosen, wanted):
            break

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
    if isinstance(inst, ins.Dot) and inst.c.name in chosen:
        return chosen[inst.c.name]  # out has c's type
    return default_layout(shape, out.dtype, num_threads)


# ---- broadcast operands: held by the threads that need them -------------------------------

def broadcast_layout(consumer: RegisterLayout, shape: tuple[int, ...]) -> RegisterLayout:
    """The layout of an operand of `shape` broadcast into a tile of layout `consumer`
    that gives every thread exactly the elements it needs: `consumer` reduced over the
    broadcast dims (size-1 dims of `shape`; its spatial modes there become replication)
    and squeezed over the leading dims `shape` lacks."""
    pad = consumer.ndim - len(shape)
    dims = [d for d in range(consumer.ndim)
            if d < pad or (shape[d - pad] == 1 and consumer.shape[d] != 1)]
    layout = consumer.reduce(dims, keepdims=True) if dims else consumer
    return layout.squeeze(tuple(range(pad))) if pad else layout


def broadcast_compatible(src: RegisterLayout, shape: tuple[int, ...],
                         dst: RegisterLayout) -> bool:
    """Whether an operand of `shape` with layout `src` can be read, broadcast, into a tile
    of layout `dst` without moving data (`KernelContext.broadcast_map`): every thread
    holds the elements it needs, at local indices that are the same in every thread."""
    if tuple(src.shape) == tuple(dst.shape):
        if src == dst:
            return True
    if src.num_threads != dst.num_threads:
        return False
    pad = dst.ndim - len(shape)
    coords = dst.table()[:, :, pad:]  # [thread, local, dim]
    flat = np.zeros(coords.shape[:2], dtype=np.int64)
    for d, n in enumerate(shape):
        flat = flat * n + (coords[:, :, d] if n != 1 else 0)
    held = np.full((src.num_threads, math.prod(shape)), -1, dtype=np.int64)
    src_coords = src.table()
    src_flat = np.zeros(src_coords.shape[:2], dtype=np.int64)
    for d, n in enumerate(shape):
        src_flat = src_flat * n + src_coords[:, :, d]
    threads = np.arange(src.num_threads)[:, None]
    held[np.broadcast_to(threads, src_flat.shape), src_flat] = \
        np.broadcast_to(np.arange(src.local_size)[None, :], src_flat.shape)
    where = held[np.arange(dst.num_threads)[:, None], flat]
    return bool((where >= 0).all() and (where == where[:1]).all())


def _broadcast_requests(insts: list[ins.Instruction], fixed: dict[str, RegisterLayout],
                        chosen: dict[str, RegisterLayout],
                        wanted: dict[str, RegisterLayout]) -> bool:
    """Ask an unannotated broadcast operand of an `elementwise`/`where` that can be made
    in any layout (`_made_in_any_layout`: a load, `full` or `arange`, or pointwise
    arithmetic on them, `rows + q0`), and that its consumer cannot read in place, for the
    consumer's layout reduced over the broadcast dims (`broadcast_layout`), and with it
    every tensor it is computed from. True if any was asked."""
    producers = {i.output.name: i for i in insts if i.output is not None}
    carried = {t.name for i in insts if isinstance(i, ins.Assign) for t in (i.dst, i.src)}
    asked = False
    for inst in insts:
        if not isinstance(inst, (ins.Elementwise, ins.Where)) or inst.out.name not in chosen:
            continue
        out_layout, out_shape = chosen[inst.out.name], inst.out.type.static_shape
        for t in inst.input_tensors():
            if t.space is not MemorySpace.REGISTER or t.type.shape == inst.out.type.shape \
                    or t.name not in chosen:
                continue
            sources = _made_in_any_layout(t, producers, {**fixed, **wanted}, carried)
            shape = t.type.static_shape
            if sources is None or broadcast_compatible(chosen[t.name], shape, out_layout):
                continue
            layout = broadcast_layout(out_layout, shape)
            if layout.num_threads == out_layout.num_threads and len(out_shape) >= len(shape):
                wanted.update((name, layout) for name in sources)
                asked = True
    return asked


def _made_in_any_layout(t: Tensor, producers: dict[str, ins.Instruction],
                        taken: dict[str, RegisterLayout], carried: set[str]) -> list[str] | None:
    """The names of `t` and of the tensors of its shape it is computed from, back through
    `cast`, `elementwise` and `where`, if all of them can take any layout: none has a
    layout already (given, annotated or asked), none is carried by a loop (`assign`),
    and the chain starts at loads, `full`s and `arange`s (operands of other shapes are
    broadcast into it and left as they are). Else None."""
    names, work = [], [t]
    while work:
        u = work.pop()
        if u.name in names:
            continue
        if u.layout is not None or u.name in taken or u.name in carried:
            return None
        producer = producers.get(u.name)
        if isinstance(producer, (ins.Cast, ins.Elementwise, ins.Where)):
            work += [v for v in producer.input_tensors() if v.type.shape == u.type.shape]
        elif not isinstance(producer, _MADE_IN_ANY_LAYOUT):
            return None
        names.append(u.name)
    if len(names) > 1 and not any(isinstance(producers.get(n), ins.Arange) for n in names):
        # (a chain from loads alone keeps the layouts it had before index tiles existed:
        # the library kernels' code is tuned with them)
        return None
    return names


# ---- dot on tensor cores: the backward requests ----------------------------------------

#: Producers that make their tile in any layout at the same cost (loads, constants,
#: index tiles): a broadcast operand they produce is asked for the layout it is read in.
_MADE_IN_ANY_LAYOUT = (ins.LoadGlobal, ins.LoadShared, ins.Full, ins.Arange)
#: Producers that take the layout their consumers ask for (else they have a rule).
_FLEXIBLE = (*_MADE_IN_ANY_LAYOUT, ins.Cast, ins.Elementwise, ins.Where)


def _requests(insts: list[ins.Instruction], fixed: dict[str, RegisterLayout],
              num_threads: int) -> dict[str, RegisterLayout]:
    """The layout each tensor's first consumer that needs one asks for (see the module
    docstring). Tensors with a layout already (type or annotation) are not asked."""
    wanted: dict[str, RegisterLayout] = {}
    producers = {i.output.name: i for i in insts if i.output is not None}

    def want(t: Tensor, layout: RegisterLayout) -> None:
        if t.space is not MemorySpace.REGISTER or t.layout is not None or t.name in fixed \
                or t.name in wanted:
            return
        wanted[t.name] = layout
        producer = producers.get(t.name)
        if isinstance(producer, (ins.Cast, ins.Elementwise, ins.Where)):
            for src in producer.input_tensors():
                if src.type.shape == t.type.shape:
                    want(src, layout)

    for inst in insts:
        if isinstance(inst, ins.Dot):
            m, n, k = inst.mnk
            if inst.b.space is MemorySpace.SHARED:  # wgmma: only a and c in registers
                operands = (inst.a, inst.c)  # (a shared a: want() passes it over)
                layouts = wgmma_layouts(m, n, k, inst.a.dtype, num_threads,
                                        shared_a=inst.a.space is MemorySpace.SHARED,
                                        interleaved=inst.groups > 1)
            else:
                operands = (inst.a, inst.b, inst.c)
                layouts = dot_layouts(m, n, k, inst.a.dtype, num_threads)
            if layouts is not None:
                for t, layout in zip(operands, layouts):
                    want(t, layout)
    for _ in range(2):  # an assign's tensors share one layout, either side asking
        for inst in insts:
            if isinstance(inst, ins.Assign):
                for x, y in ((inst.dst, inst.src), (inst.src, inst.dst)):
                    if x.name in wanted:
                        want(y, wanted[x.name])
    return wanted


