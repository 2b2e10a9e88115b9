"""Pass `convert_layouts`: move register tiles between layouts where an instruction
needs another layout than its operand has.

Expects: a verified program after `infer_layouts` (every register tensor has a
`RegisterLayout`). Guarantees: a verified program in which every instruction can read
its operands in place:

- `dot` on tensor cores: a, b, c are made of mma fragments that every warp holds in the
  same registers (what the `dot` lowering checks); when they are not, every operand
  that differs from the tiling of `dot_layouts` is converted to it, and when `out`'s
  layout is not that C tiling, the `dot` writes a new tile in the C tiling which is then
  converted to `out`;
- `elementwise`, `where`, `cast`: every tensor operand is held by the threads that need
  it, at the same local index in every thread (`broadcast_compatible`, the rule of
  `KernelContext.broadcast_map`); else it is converted to `out`'s layout (same shape) or
  to `out`'s layout reduced over the broadcast dims (`broadcast_layout`);
- `assign`: `src` has `dst`'s layout (else `src` is converted).

Where layouts already agree, nothing is inserted: the pass returns the program unchanged.

A conversion of `%t` to layout `L` is plain IR, inserted right before the instruction
that needs it (inside the same loop or branch), whose operand becomes the new tensor
`%t.cvt` (suffixes `.cvt.1`, ... keep names unique):

    %t.cvt.smem = alloc_shared : shared<dtype>[shape]   (swizzled(shape, dtype) for 2-D
                                                          tiles, row_major otherwise)
    store_shared dst=%t.cvt.smem, src=%t, offsets=(0, ...)
    sync
    %t.cvt = load_shared src=%t.cvt.smem, offsets=(0, ...) : register<dtype>[shape] {L}
    sync                                                  (the buffer may be reused)
    free_shared %t.cvt.smem

The shared-memory lowering handles whole-byte elements only. A sub-byte operand of a
`cast` is therefore not converted itself: the cast is done in the source's layout into a
new tile (`%out.cvt`), and that wider tile is converted into `out` (a `view` + `cast`
of packed weights keeps its layout, and the conflict is resolved on the f16 side). In
the quantized matmul the b operand of `dot` is the f16 tile `cast(view(...)) * scale`
in the weights' register layout; it is converted to the mma B tiling right before the
`dot` (and the `[1, bn]` scale row needs no conversion: `infer_layouts` loads it in the
layout the product needs). A sub-byte tile that must move otherwise (an operand of an
`elementwise` or `where`) is a `VMError` naming its dtype.
"""

from __future__ import annotations

from dataclasses import replace

from tilevm.backend.analysis.fragments import MMA_INSTRUCTIONS, dot_layouts
from tilevm.backend.passes.context import DEFAULT_CONTEXT, PassContext
from tilevm.backend.passes.infer_layouts import broadcast_compatible, broadcast_layout
from tilevm.dtypes import parse
from tilevm.ir import instructions as ins
from tilevm.ir.errors import VMError
from tilevm.ir.expr import Const
from tilevm.ir.printer import format_instruction
from tilevm.ir.stmt import For, If, Program, Seq
from tilevm.ir.transform import instructions
from tilevm.ir.types import MemorySpace, Tensor, TensorType
from tilevm.layouts import LayoutError, RegisterLayout, divide
from tilevm.layouts.shared_layout import SharedLayout, row_major, swizzled

_INT32 = parse("int32")


def convert_layouts(program: Program, context: PassContext = DEFAULT_CONTEXT) -> Program:
    names = set()
    for inst in instructions(program.body):
        names.update(t.name for t in inst.input_tensors())
        if inst.output is not None:
            names.add(inst.output.name)
    rewriter = _Rewriter(names, program.num_threads)
    body = rewriter.seq(program.body)
    if not rewriter.changed:
        return program
    return replace(program, body=body)


def shareable(dtype) -> bool:
    """Whether a tile of `dtype` can go through shared memory (whole-byte elements)."""
    return dtype.bits >= 8 and dtype.bits % 8 == 0


def conversion_layout(shape: tuple[int, ...], dtype) -> SharedLayout:
    """The shared layout a conversion goes through: rows kept apart by the swizzle of
    `swizzled` for 2-D+ tiles (16-byte chunks stay whole; bank conflicts of row-wise and
    ldmatrix-like column-wise accesses are spread), else row-major."""
    return swizzled(shape, dtype) if len(shape) >= 2 else row_major(shape, dtype)


class _Rewriter:
    def __init__(self, names: set[str], num_threads: int) -> None:
        self.names = names
        self.num_threads = num_threads
        self.changed = False

    # ---- statements ------------------------------------------------------------------------
    def seq(self, seq: Seq) -> Seq:
        body = []
        for stmt in seq.body:
            if isinstance(stmt, ins.Instruction):
                body += self.instruction(stmt)
            elif isinstance(stmt, Seq):
                body.append(self.seq(stmt))
            elif isinstance(stmt, For):
                body.append(replace(stmt, body=self.seq(stmt.body)))
            elif isinstance(stmt, If):
                body.append(replace(stmt, then_body=self.seq(stmt.then_body),
                                    else_body=None if stmt.else_body is None
                                    else self.seq(stmt.else_body)))
            else:
                body.append(stmt)
        return Seq(body=tuple(body))

    def fresh(self, base: str, suffix: str = ".cvt") -> str:
        name, i = f"{base}{suffix}", 0
        while name in self.names:
            i += 1
            name = f"{base}{suffix}.{i}"
        self.names.add(name)
        return name

    def fail(self, inst: ins.Instruction, message: str) -> VMError:
        return VMError(message, format_instruction(inst), inst.loc)

    # ---- one conversion -------------------------------------------------------------------
    def convert(self, inst: ins.Instruction, t: Tensor, layout: RegisterLayout,
                out: Tensor | None = None) -> tuple[list, Tensor]:
        """The statements converting `t` to `layout` (into `out`, or a fresh tensor)."""
        if not shareable(t.dtype):
            raise self.fail(inst, f"%{t.name} ({t.dtype}) must change layout (from {t.layout} "
                            f"to {layout}), but {t.dtype} tiles cannot go through shared "
                            "memory (sub-byte elements); cast it to a wider type first")
        self.changed = True
        shape = t.type.static_shape
        if out is None:
            out = Tensor(self.fresh(t.name),
                         TensorType(MemorySpace.REGISTER, t.dtype, t.type.shape, layout))
        smem = Tensor(self.fresh(out.name, ".smem"),
                      TensorType(MemorySpace.SHARED, t.dtype, t.type.shape,
                                 conversion_layout(shape, t.dtype)))
        zero = tuple(Const(0, _INT32) for _ in shape)
        loc = inst.loc
        stmts = [ins.AllocShared(out=smem, loc=loc),
                 ins.StoreShared(dst=smem, src=t, offsets=zero, loc=loc),
                 ins.Sync(loc=loc),
                 ins.LoadShared(out=out, src=smem, offsets=zero, loc=loc),
                 ins.Sync(loc=loc),
                 ins.FreeShared(tensor=smem, loc=loc)]
        return stmts, out

    # ---- per instruction ------------------------------------------------------------------
    def instruction(self, inst: ins.Instruction) -> list:
        if isinstance(inst, ins.Dot):
            return self.dot(inst)
        if isinstance(inst, ins.Cast):
            return self.cast(inst)
        if isinstance(inst, (ins.Elementwise, ins.Where)):
            return self.pointwise(inst)
        if isinstance(inst, ins.Assign) and _register(inst.src) and _register(inst.dst) \
                and inst.src.layout != inst.dst.layout:
            stmts, src = self.convert(inst, inst.src, inst.dst.layout)
            return [*stmts, replace(inst, src=src)]
        return [inst]

    def pointwise(self, inst: ins.Elementwise | ins.Where) -> list:
        out = inst.out
        before: list = []
        done: dict[str, Tensor] = {}

        def fix(t):
            if not isinstance(t, Tensor) or not _register(t) or not _register(out):
                return t
            shape = t.type.static_shape
            if broadcast_compatible(t.layout, shape, out.layout):
                return t
            if t.name not in done:
                layout = out.layout if t.type.shape == out.type.shape else \
                    broadcast_layout(out.layout, shape)
                stmts, done[t.name] = self.convert(inst, t, layout)
                before.extend(stmts)
            return done[t.name]

        if isinstance(inst, ins.Elementwise):
            new = replace(inst, args=tuple(fix(a) for a in inst.args))
        else:
            new = replace(inst, cond=fix(inst.cond), x=fix(inst.x), y=fix(inst.y))
        return [*before, new] if before else [inst]

    def cast(self, inst: ins.Cast) -> list:
        src, out = inst.src, inst.out
        if not (_register(src) and _register(out)) or \
                broadcast_compatible(src.layout, src.type.static_shape, out.layout):
            return [inst]
        if shareable(src.dtype) and (src.dtype.bits <= out.dtype.bits
                                     or not shareable(out.dtype)):
            stmts, new_src = self.convert(inst, src, out.layout)
            return [*stmts, replace(inst, src=new_src)]
        if shareable(out.dtype):  # cast in the source's layout, then move the result
            wide = Tensor(self.fresh(out.name), out.type.with_layout(src.layout))
            stmts, _ = self.convert(inst, wide, out.layout, out=out)
            return [replace(inst, out=wide), *stmts]
        raise self.fail(inst, f"cast from {src.dtype} to {out.dtype} needs a layout "
                        f"conversion (from {src.layout} to {out.layout}), but neither type's "
                        "tiles can go through shared memory (sub-byte elements)")

    def dot(self, inst: ins.Dot) -> list:
        a, b, c, out = inst.a, inst.b, inst.c, inst.out
        if not all(_register(t) for t in (a, b, c, out)):
            return [inst]
        m, n, k = inst.mnk
        tiling = dot_layouts(m, n, k, a.dtype, self.num_threads)
        if tiling is None or (out.layout == c.layout and mma_accepts(
                a.layout, b.layout, c.layout, a.dtype, k)):
            return [inst]  # no tensor cores (the lowering reports it), or nothing to do
        before: list = []
        operands = {}
        for name, t, layout in (("a", a, tiling[0]), ("b", b, tiling[1]), ("c", c, tiling[2])):
            if t.layout != layout:
                stmts, t = self.convert(inst, t, layout)
                before += stmts
            operands[name] = t
        after: list = []
        if out.layout != tiling[2]:
            tmp = Tensor(self.fresh(out.name), out.type.with_layout(tiling[2]))
            after, _ = self.convert(inst, tmp, out.layout, out=out)
            operands["out"] = tmp
        return [*before, replace(inst, **operands), *after]


def _register(t: Tensor) -> bool:
    return t.space is MemorySpace.REGISTER and isinstance(t.layout, RegisterLayout)


def mma_accepts(la: RegisterLayout, lb: RegisterLayout, lc: RegisterLayout, dtype,
                k: int) -> bool:
    """Whether the `dot` lowering can use a, b, c in these layouts as they are: each is
    made of mma fragments (`divide`), and every warp holds the A and B fragments its C
    fragments need, in the same registers as warp 0 (backend/llvm/lowering/mma.py)."""
    entry = MMA_INSTRUCTIONS.get(dtype)
    if entry is None:
        return False
    (_, _, fk), frag_a, frag_b, frag_c = entry
    try:
        xa, xb, xc = divide(la, frag_a()), divide(lb, frag_b()), divide(lc, frag_c())
    except LayoutError:
        return False
    tables = {"a": xa.table(), "b": xb.table(), "c": xc.table()}
    if xa.num_threads != xc.num_threads or xb.num_threads != xc.num_threads:
        return False
    plan = None
    for w in range(xc.num_threads):
        where = {name: {tuple(int(v) for v in coord): l
                        for l, coord in enumerate(tables[name][w])} for name in ("a", "b")}
        mine = []
        for i, j in tables["c"][w].tolist():
            steps = []
            for kk in range(k // fk):
                la_, lb_ = where["a"].get((i, kk)), where["b"].get((kk, j))
                if la_ is None or lb_ is None:
                    return False
                steps.append((la_, lb_))
            mine.append(steps)
        if plan is not None and mine != plan:
            return False
        plan = mine
    return True
