"""Pass `select_instructions`: pick the machine instruction for each access and `dot`.

Expects: a program after `vectorize_memory`. Guarantees: the lowerings below replace
the memory pass's choice where a better instruction applies; codegen emits exactly the
recorded form:

- `load_shared` of 16-bit elements whose register layout is made of `ldmatrix`
  fragments, with 16-byte aligned rows (`analysis.ldmatrix.select_ldmatrix` states the
  rule): `lowering=ldmatrix(num=N, trans=T, row_dim=R, col_dim=C)`, the instruction
  `ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16` (N = 4 where the register count
  allows, else 2, else 1; `.trans` when a register's two halves run along the rows).
  Other `load_shared`s keep `vector(...)` (`ld.shared.vN`), and so do reads of a peer
  block's shared memory (`peer=`: `ldmatrix` reads the block's own only).
- `store_shared` of 16-bit elements by the same rule, on sm_90 and later (`context.arch`):
  `lowering=stmatrix(num=N, trans=T, row_dim=R, col_dim=C)`, the instruction
  `stmatrix.sync.aligned.m8n8.xN[.trans].shared.b16` (the mirror of `ldmatrix`: each
  lane addresses one 16-byte row, N registers of two elements a thread; one instruction
  for what `st.shared.b32` stores in 4 N). Others keep `vector(...)`.
- `copy_async` in 16-byte chunks: `lowering=cp_async(cache='cg', elements=W, bytes=16,
  whole=..., dim=D)` (`cp.async.cg.shared.global`, bypassing L1); 8- and 4-byte chunks:
  `cp_async(cache='ca', ...)` (the only sizes `.cg` lacks); `D` is the chunk's dimension
  (`vectorize_memory` chose it); `whole=True` when dimension `D`'s extent and the tile's
  offset along it are provably multiples of the chunk (so a chunk is never cut by the
  edge: one compare instead of the count of elements left); no provable chunk:
  `lowering=load_store` (each thread copies elements with plain loads and stores, at
  once; the later `copy_async_wait` has nothing to wait for).
- `copy_async` on sm_90a (`context.arch`) from a view fixed for the whole launch, whose tile one
  tensor-memory-accelerator copy can write (`tma_form` states the rule):
  `lowering=tma(dims=..., box=..., swizzle=S, bytes=B)` (`cp.async.bulk.tensor` from
  thread 0 on a tensor map the runtime encodes at launch). Only in programs whose
  groups can complete on a ring of mbarriers (`analysis.tma.tma_ring_bound`: a
  `sync` between each `copy_async_wait` and the next copy, a bounded number of groups
  pending); elsewhere, and for other copies, the `cp_async` forms above.
- `dot` on tensor cores: `lowering=mma_sync(shape='m16n8k16', acc='f32')` for f16/bf16
  inputs, `mma_sync(shape='m16n8k32', acc='s32')` for int8/uint8 (the register layouts
  were made of these fragments by `infer_layouts`); any other input dtype is a VMError
  at the `dot`'s line.
- `launch_dependents`, `wait_prerequisites` on targets with programmatic dependent
  launch (`Target.dependent_launch`, sm_90 and later): `lowering=griddepcontrol`
  (`griddepcontrol.launch_dependents` / `.wait`); elsewhere no lowering (no code).
- `dot` whose b is a shared tile: `lowering=wgmma(shape='m64nNk16', acc='f32')` (N = b's
  columns; f16/bf16 inputs, else a VMError; Hopper's warpgroup MMA, sm_90a only, which
  `compile_program` checks).
"""

from __future__ import annotations

from dataclasses import replace

from tilevm.backend.analysis.divisibility import ProgramPoint, rewrite_instructions
from tilevm.backend.analysis.fragments import MMA_INSTRUCTIONS, WGMMA_DTYPES
from tilevm.backend.analysis.ldmatrix import select_ldmatrix
from tilevm.backend.analysis.shared_memory import shared_plan
from tilevm.backend.analysis.signature import signature_from_program
from tilevm.backend.analysis.tma import tma_ring_bound
from tilevm.backend.analysis.vectors import chunk_dim
from tilevm.backend.passes.context import DEFAULT_CONTEXT, PassContext
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.expr import Const
from tilevm.ir.printer import format_instruction
from tilevm.ir.stmt import Program
from tilevm.ir.types import MemorySpace
from tilevm.layouts.shared_layout import SharedLayout

TMA_ARCHS = ("sm_90a",)  # where `copy_async` may go through the tensor memory accelerator
TMA_SWIZZLES = {None: 0, (1, 4, 3): 32, (2, 4, 3): 64, (3, 4, 3): 128}  # ours -> TMA's
TMA_MAX_BOX = 256
STMATRIX_SM = 90  # `stmatrix` is in sm_90 and later


def select_instructions(program: Program, context: PassContext = DEFAULT_CONTEXT) -> Program:
    arch = context.arch
    plan = shared_plan(program)
    # TMA copies complete on a ring of mbarriers, which the program's pipeline must allow
    tma = arch in TMA_ARCHS and tma_ring_bound(program) is not None
    launch_views = _launch_invariant_views(program) if tma else set()

    stmatrix = arch is not None and context.target.sm >= STMATRIX_SM
    griddepcontrol = arch is not None and context.target.dependent_launch

    def choose(inst: ins.Instruction, point: ProgramPoint) -> ins.Instruction:
        if (isinstance(inst, ins.LoadShared) and inst.peer is None) or (
                isinstance(inst, ins.StoreShared) and stmatrix
                and inst.src.dtype == inst.dst.dtype):
            load = isinstance(inst, ins.LoadShared)
            shared, tile = (inst.src, inst.out) if load else (inst.dst, inst.src)
            alloc = plan.allocations.get(shared.name)
            choice = select_ldmatrix(
                tile.layout, shared.layout, program.num_threads,
                alloc_offset=alloc.offset if alloc else 1,
                offset_divisors=[point.divisor(o) for o in inst.offsets])
            if choice is not None:
                return replace(inst, lowering=ins.lowering(
                    "ldmatrix" if load else "stmatrix", num=choice.num, trans=choice.trans,
                    row_dim=choice.row_dim, col_dim=choice.col_dim))
        elif isinstance(inst, ins.CopyAsync):
            if inst.lowering is None:
                raise VMError("copy_async has no chunk size (run the vectorize_memory pass "
                              "first)", format_instruction(inst), inst.loc)
            if inst.src.name in launch_views:
                form = tma_form(point, inst, plan.allocations[inst.dst.name].offset)
                if form is not None:
                    return replace(inst, lowering=form)
            if inst.lowering.name == "chunk":
                size, per = inst.lowering["bytes"], inst.lowering["elements"]
                dim = chunk_dim(inst.lowering, inst.dst.type.ndim)
                # A chunk lies wholly inside or wholly outside its dimension when that
                # dimension's extent and the tile's offset along it are multiples of it.
                whole = all(point.divisor(e) % per == 0
                            for e in (inst.src.type.shape[dim], inst.offsets[dim]))
                return replace(inst, lowering=ins.lowering(
                    "cp_async", cache="cg" if size == 16 else "ca",
                    elements=per, bytes=size, whole=whole, dim=dim))
            return replace(inst, lowering=ins.lowering("load_store"))
        elif isinstance(inst, (ins.LaunchDependents, ins.WaitPrerequisites)):
            return replace(inst, lowering=ins.lowering("griddepcontrol")) \
                if griddepcontrol else inst
        elif isinstance(inst, ins.Dot) and inst.b.space is MemorySpace.SHARED:
            if inst.a.dtype not in WGMMA_DTYPES:
                raise VMError(f"dot with a shared b on {inst.a.dtype} inputs is not "
                              "supported by the GPU backend yet (wgmma: f16, bf16)",
                              format_instruction(inst), inst.loc)
            n = inst.mnk[1]
            return replace(inst, lowering=ins.lowering("wgmma", shape=f"m64n{n}k16",
                                                       acc="f32"))
        elif isinstance(inst, ins.Dot):
            entry = MMA_INSTRUCTIONS.get(inst.a.dtype)
            if entry is None:
                names = ", ".join(sorted(str(t) for t in MMA_INSTRUCTIONS))
                raise VMError(f"dot on {inst.a.dtype} inputs is not supported by the GPU "
                              f"backend yet (tensor cores: {names})",
                              format_instruction(inst), inst.loc)
            (m, n, k) = entry[0]
            acc = "f32" if inst.a.dtype.is_float else "s32"
            return replace(inst, lowering=ins.lowering("mma_sync", shape=f"m{m}n{n}k{k}",
                                                       acc=acc))
        return inst

    return rewrite_instructions(program, choose)


def _launch_invariant_views(program: Program) -> set[str]:
    """Names of the global views fixed for a whole launch (the runtime's `Signature.views`:
    top level, offset, shape and strides over scalar parameters only): a tensor map,
    encoded once per launch, can describe only those."""
    return {v.name for v in signature_from_program(program).views}


def tma_form(point: ProgramPoint, inst: ins.CopyAsync, dst_offset: int) -> ins.Lowering | None:
    """`tma(dims=..., box=..., swizzle=S, bytes=B)` when one `cp.async.bulk.tensor` can
    copy the whole tile, else None. The map's dimensions are the view's, innermost
    (unit global stride, unit shared stride) first, then by growing shared stride; the
    shared tile must be the dense box in that order (its layout's strides the running
    products of the box), with no swizzle or the 32/64/128-byte one whose rows are
    exactly the box's innermost extent; global strides and the view's offset 16-byte
    multiples (TMA's rules), the box at most 256 per dimension, 16-byte inner rows."""
    layout = inst.dst.layout
    view = point.view(inst.src)
    if not isinstance(layout, SharedLayout) or layout.element_bits % 8 or layout.rank > 5:
        return None
    elem = layout.element_bits // 8
    box = layout.shape
    order = sorted(range(layout.rank), key=lambda d: (layout.strides[d], d))
    inner = order[0]
    if not (isinstance(view.strides[inner], Const) and view.strides[inner].value == 1):
        return None
    running = 1
    for d in order:  # dense, innermost first
        if box[d] > 1 and layout.strides[d] != running:
            return None
        if box[d] > TMA_MAX_BOX:
            return None
        running *= box[d]
    row_bytes = box[inner] * elem
    sw = layout.swizzle
    key = None if sw is None else (sw.bits, sw.base, sw.shift)
    if key not in TMA_SWIZZLES or row_bytes % 16:
        return None
    swizzle = TMA_SWIZZLES[key]
    if swizzle and (row_bytes != swizzle or dst_offset % sw.period):
        return None
    if dst_offset % 128:  # TMA's shared destination alignment
        return None
    if any(point.divisor(e) * elem % 16 for e in
           (view.offset, *(view.strides[d] for d in order[1:]))):
        return None
    return ins.lowering("tma", dims=",".join(map(str, order)),
                        box=",".join(str(box[d]) for d in order), swizzle=swizzle,
                        bytes=running * elem)
