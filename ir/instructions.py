"""The VM's instruction set: one frozen dataclass per instruction.

Each class's docstring is the instruction's definition. Its `opname` is the name it is
printed with and the key under which the other layers find it: the interpreter's
`exec_<opname>` (vm/interp_exec_memory.py, vm/interp_exec_tiles.py), the verifier's
`check_<opname>` (ir/verify_instructions.py), and the backend's lowering.

An instruction that produces a tensor holds it in `out` (its name and full type);
operands are `Tensor`s or scalar `Expr`s. Coordinates and offsets are in elements.

`lowering` is empty in the programs users write; the backend's lowering passes fill it
with the machine form they chose for the instruction (`Lowering`, e.g.
`vector(bytes=16)`, `ldmatrix(num=4, trans=True)`, `mma_sync(shape='m16n8k16')`), which
codegen then emits. It prints as one more field, so `vmc compile --dump-after PASS`
shows every decision next to the instruction it concerns.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from tilevm.ir.errors import SourceLoc
from tilevm.ir.expr import Expr, Var
from tilevm.ir.types import Pointer, Tensor


@dataclass(frozen=True)
class Lowering:
    """A machine form the backend chose for one instruction: a name and parameters,
    written like a call, `ldmatrix(num=4, trans=True)` (the parameters are ints, bools
    or strings). Each backend pass documents the forms it assigns."""

    name: str
    params: tuple[tuple[str, int | bool | str], ...] = ()

    def __getitem__(self, key: str) -> int | bool | str:
        for name, value in self.params:
            if name == key:
                return value
        raise KeyError(f"{self} has no parameter {key!r}")

    def __str__(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.params)})"


def lowering(name: str, **params: int | bool | str) -> Lowering:
    """`Lowering(name, params)` with keyword parameters, in the order given."""
    return Lowering(name, tuple(params.items()))


# Field metadata: the IR text leaves the field out where it has its default value (an
# option most instructions do not use).
OMITTED_AT_DEFAULT = {"omitted_at_default": True}


@dataclass(frozen=True, kw_only=True)
class Instruction:
    opname: ClassVar[str]
    loc: SourceLoc | None = None
    lowering: Lowering | None = None

    @property
    def output(self) -> Tensor | None:
        """The tensor the instruction defines (None: none, or a scalar, `defines`)."""
        out = getattr(self, "out", None)
        return out if isinstance(out, Tensor) else None

    @property
    def defines(self) -> Var | None:
        """The scalar variable the instruction defines (`atomic_add`), if any."""
        out = getattr(self, "out", None)
        return out if isinstance(out, Var) else None

    def operands(self) -> tuple[Any, ...]:
        """Every field but `out`, `loc` and `lowering`, in declaration order."""
        return tuple(getattr(self, f.name) for f in fields(self)
                     if f.name not in ("out", "loc", "lowering"))

    def input_tensors(self) -> tuple[Tensor, ...]:
        """The tensors the instruction reads (or writes through, for stores)."""
        found: list[Tensor] = []
        for value in self.operands():
            items = value if isinstance(value, tuple) else (value,)
            found += [v for v in items if isinstance(v, Tensor)]
        return tuple(found)


# ---- global memory -----------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class GlobalView(Instruction):
    """`out` views global memory at `ptr + offset` (in elements) as a tensor of
    `out.type.shape` (scalar expressions) with `strides` (elements). Nothing is read."""

    opname: ClassVar[str] = "global_view"
    out: Tensor
    ptr: Pointer
    offset: Expr
    strides: tuple[Expr, ...]


@dataclass(frozen=True, kw_only=True)
class LoadGlobal(Instruction):
    """`out[i] = src[offsets + i]` for every coordinate `i` of `out`'s (static) shape;
    an element outside `src`'s shape (a ragged edge) reads `other` instead."""

    opname: ClassVar[str] = "load_global"
    out: Tensor
    src: Tensor
    offsets: tuple[Expr, ...]
    other: int | float = 0


@dataclass(frozen=True, kw_only=True)
class StoreGlobal(Instruction):
    """`dst[offsets + i] = src[i]` for every coordinate `i` of the register tensor `src`
    that falls inside `dst`'s shape; elements outside are not written."""

    opname: ClassVar[str] = "store_global"
    dst: Tensor
    src: Tensor
    offsets: tuple[Expr, ...]


@dataclass(frozen=True, kw_only=True)
class AtomicAdd(Instruction):
    """Once for the whole block: `out = dst[offsets]; dst[offsets] += value` as one
    indivisible step against every other block (`dst` an int32 global tensor, the sum
    wrapping around). `out`, a scalar variable, is the old value, the same in every
    thread. It orders memory like a lock handed from block to block: every global write
    the block made before it is visible to a block that saw its addition (an `atomic_add`
    on the same element whose `out` counts it) after that block's `atomic_add`. So the
    last of n blocks to add 1 to a counter (`out == n - 1`) may read what the other
    n - 1 wrote (split-K's partial sums). The offsets must lie inside `dst`."""

    opname: ClassVar[str] = "atomic_add"
    out: Var
    dst: Tensor
    offsets: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, kw_only=True)
class GlobalTimer(Instruction):
    """Once for the whole block: `out`, an int64 scalar variable, is the GPU's global
    timer in nanoseconds (`%globaltimer`), read by one thread and the same in every
    thread: a timeline of where a kernel's blocks spend their time (stored to global
    memory by the program). It orders nothing; in the interpreter it is the number of
    instructions the block has executed (deterministic, never decreasing)."""

    opname: ClassVar[str] = "globaltimer"
    out: Var


@dataclass(frozen=True, kw_only=True)
class TilePost(Instruction):
    """Once for the whole block, after every thread of it got here: `sem[offsets] +=
    value` (an int32 semaphore in global memory, the sum wrapping around) with release
    semantics: every global write the block made before it is visible to a block whose
    `tile_wait` on that element returns because of it, in this kernel or another one
    running at the same time (tile-level synchronization of dependent kernels,
    docs/tile-sync.md). The offsets must lie inside `sem`."""

    opname: ClassVar[str] = "tile_post"
    sem: Tensor
    offsets: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, kw_only=True)
class TileWait(Instruction):
    """Block the whole block until the semaphore `sem[offsets]` has reached `expected`:
    until `(int32)(sem[offsets] - expected) >= 0`, a comparison that survives the
    counter wrapping around (a semaphore only grows: each call of a kernel pair waits
    for its generation's count, and no reset is needed between calls). Acquire
    semantics: the writes the posting blocks made before their `tile_post` are visible
    to this block after it. A wait that no post can satisfy is a deadlock, which the
    interpreter reports at the wait's line. The offsets must lie inside `sem`."""

    opname: ClassVar[str] = "tile_wait"
    sem: Tensor
    offsets: tuple[Expr, ...]
    expected: Expr


# ---- shared memory -----------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class AllocShared(Instruction):
    """Allocate `out` (a shared tensor: shape and `SharedLayout` in its type). Its
    contents are undefined until written."""

    opname: ClassVar[str] = "alloc_shared"
    out: Tensor


@dataclass(frozen=True, kw_only=True)
class FreeShared(Instruction):
    """End `tensor`'s lifetime; its bytes may be reused. Using it afterwards is an error."""

    opname: ClassVar[str] = "free_shared"
    tensor: Tensor


@dataclass(frozen=True, kw_only=True)
class LoadShared(Instruction):
    """`out[i] = src[offsets + i]` (a register tile read out of a shared tensor; the
    tile must lie inside `src`).

    `peer` (a program with `cluster` n > 1): read `src` in the shared memory of block
    `peer` of this block's cluster (its rank, 0 .. n - 1; a block's own is
    `block_idx(0) % n`) instead of this block's own: distributed shared memory. The
    reads are ordered by `cluster_sync`: what the peer wrote before one is read after it,
    and the peer writes the tile again only after the next. A program with such reads
    keeps each block's shared memory until every block of its cluster is done (its end
    is an implicit `cluster_sync`)."""

    opname: ClassVar[str] = "load_shared"
    out: Tensor
    src: Tensor
    offsets: tuple[Expr, ...]
    peer: Expr | None = field(default=None, metadata=OMITTED_AT_DEFAULT)


@dataclass(frozen=True, kw_only=True)
class StoreShared(Instruction):
    """`dst[offsets + i] = src[i]` (a register tile written into a shared tensor; the
    tile must lie inside `dst`)."""

    opname: ClassVar[str] = "store_shared"
    dst: Tensor
    src: Tensor
    offsets: tuple[Expr, ...]


@dataclass(frozen=True, kw_only=True)
class CopyAsync(Instruction):
    """Start copying the global tile `src[offsets + i]`, `i` over `dst`'s shape, into the
    shared tensor `dst`; elements outside `src`'s shape are filled with zero. The copy is
    in flight until a `copy_async_wait` retires the group it was committed in.

    `multicast` (a program with `cluster` > 1 and a producer warp): every block of the
    cluster issues this copy with the same source and offsets, and the tile is read from
    global memory once for all of them (each block fetches a slice and the tensor memory
    accelerator writes it into every block's `dst`). What the copy means for one block
    is unchanged."""

    opname: ClassVar[str] = "copy_async"
    dst: Tensor
    src: Tensor
    offsets: tuple[Expr, ...]
    multicast: bool = field(default=False, metadata=OMITTED_AT_DEFAULT)


@dataclass(frozen=True, kw_only=True)
class CopyAsyncCommit(Instruction):
    """Close the group of async copies started since the last commit."""

    opname: ClassVar[str] = "copy_async_commit"


@dataclass(frozen=True, kw_only=True)
class CopyAsyncWait(Instruction):
    """Wait until at most `n` committed groups are still in flight (this thread's copies;
    a `sync` after it makes every thread's copies visible to all)."""

    opname: ClassVar[str] = "copy_async_wait"
    n: int


@dataclass(frozen=True, kw_only=True)
class Sync(Instruction):
    """Barrier for the whole block; shared-memory writes before it are visible after it."""

    opname: ClassVar[str] = "sync"


@dataclass(frozen=True, kw_only=True)
class ClusterSync(Instruction):
    """Barrier for the whole cluster (a program with `cluster` > 1): every thread of
    every block of the cluster waits here for all the others. Shared-memory writes of
    each block before it are visible to every block of the cluster after it
    (`load_shared(..., peer=)`); for the block itself it is a `sync`."""

    opname: ClassVar[str] = "cluster_sync"


# ---- launches that overlap (programmatic dependent launch) ---------------------------------

@dataclass(frozen=True, kw_only=True)
class LaunchDependents(Instruction):
    """Let the kernel launched after this one on the stream start early: once every
    block of this grid has executed `launch_dependents` (any of its threads, once) or
    finished, a next kernel that opted in (`wait_prerequisites`) may begin its blocks
    while this grid's last ones still run. It promises nothing about this kernel's
    memory: the next kernel's `wait_prerequisites` still waits for this whole grid to
    complete. So it may stand anywhere, the earlier the more overlap; it is a no-op for a
    next kernel that did not opt in, and on targets before sm_90."""

    opname: ClassVar[str] = "launch_dependents"


@dataclass(frozen=True, kw_only=True)
class WaitPrerequisites(Instruction):
    """Wait until the kernels this one was launched after have completed and their
    memory writes are visible. A kernel with this instruction opts in to programmatic
    dependent launch (`Signature.dependent_launch`): the runtime may start it before the
    previous kernel on the stream has finished, so everything before the wait runs
    beside that kernel. It stands at the top level of the body (every thread executes
    it), before every global write (`store_global`, `atomic_add`: the previous kernel may
    still read or write that memory); a global read before it must be of data no
    earlier kernel in the stream writes (weights), which is the program's promise."""

    opname: ClassVar[str] = "wait_prerequisites"


# ---- register tiles ----------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Full(Instruction):
    """`out[i] = value` for every element (the value cast to `out`'s dtype)."""

    opname: ClassVar[str] = "full"
    out: Tensor
    value: Expr


@dataclass(frozen=True, kw_only=True)
class Arange(Instruction):
    """`out[i] = i[dim]` for every coordinate `i` of `out`: each element is its own index
    along dimension `dim` (an integer tile whose dtype holds `shape[dim] - 1`). With
    broadcasting arithmetic and comparisons it gives the masks computed from element
    indices (a causal mask is `cols + kv0 <= rows + q0`)."""

    opname: ClassVar[str] = "arange"
    out: Tensor
    dim: int


@dataclass(frozen=True, kw_only=True)
class Assign(Instruction):
    """Overwrite the register tensor `dst` with `src` (same type): how a loop carries a
    tile from one iteration to the next."""

    opname: ClassVar[str] = "assign"
    dst: Tensor
    src: Tensor


@dataclass(frozen=True, kw_only=True)
class View(Instruction):
    """Reinterpret the bits each thread holds: thread t's local elements of `src`, as a
    bit array (element l at bits [l*b, (l+1)*b)), are read back as `out`'s elements
    under `out`'s layout and dtype. Legal iff both layouts are given, have the same
    threads, and bits per thread are equal. Free at run time."""

    opname: ClassVar[str] = "view"
    out: Tensor
    src: Tensor


@dataclass(frozen=True, kw_only=True)
class Cast(Instruction):
    """`out[i] = convert(src[i] * 2^exponent)` to `out`'s dtype: to a float, round to
    nearest even (saturating for finite-only formats, like `dtypes.encode`); to an
    integer, round to nearest even and saturate. A nonzero `exponent` takes a 1..8-bit
    source and a float `out`: a low-bit float's conversion is a move of its fields and
    one multiplication by a power of two (dtypes/conversion.py), which the exponent
    joins, so a kernel can leave that power of two to a later, cheaper multiplication
    (the decode kernel: its f32 group scale)."""

    opname: ClassVar[str] = "cast"
    out: Tensor
    src: Tensor
    exponent: int = field(default=0, metadata=OMITTED_AT_DEFAULT)


UNARY_TENSOR_OPS = ("neg", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "not")
BINARY_TENSOR_OPS = ("add", "sub", "mul", "div", "mod", "min", "max", "and", "or", "xor",
                     "shl", "shr", "lt", "le", "eq", "ne", "gt", "ge")
COMPARISON_TENSOR_OPS = ("lt", "le", "eq", "ne", "gt", "ge")
TERNARY_TENSOR_OPS = ("fma",)  # fma(a, b, c) = a * b + c, rounded once (floats)


@dataclass(frozen=True, kw_only=True)
class Elementwise(Instruction):
    """`out[i] = op(x[i], ...)` with numpy broadcasting of tensor operands; scalar
    operands broadcast to every element. Arithmetic happens in `out`'s dtype (f32 for
    f16/bf16 math, then rounded); comparisons give bool (uint1); `fma(a, b, c)` is the
    exact `a * b + c` rounded once to `out`'s dtype (floats only)."""

    opname: ClassVar[str] = "elementwise"
    op: str
    out: Tensor
    args: tuple[Tensor | Expr, ...]


@dataclass(frozen=True, kw_only=True)
class Where(Instruction):
    """`out[i] = x[i] if cond[i] else y[i]` (broadcasting; scalars allowed for x, y)."""

    opname: ClassVar[str] = "where"
    out: Tensor
    cond: Tensor
    x: Tensor | Expr
    y: Tensor | Expr


REDUCE_OPS = ("sum", "max", "min")


@dataclass(frozen=True, kw_only=True)
class Reduce(Instruction):
    """`out = op over dimension dim of src`; with `keepdim` the reduced dimension stays
    with size 1. A float sum is specified as the exact sum rounded once to `out`'s dtype
    (the interpreter's float64 sum; a GPU's f32 accumulation may differ in the last
    bits of f32)."""

    opname: ClassVar[str] = "reduce"
    op: str
    out: Tensor
    src: Tensor
    dim: int
    keepdim: bool = False


@dataclass(frozen=True, kw_only=True)
class Dot(Instruction):
    """`out = a @ b + c` for a[m, k], b[k, n], c[m, n]: products and sums in f32 (exact
    products of the inputs), the result rounded once to `out`'s dtype. `c` is a register
    tile; `b` is a register tile or a whole shared tile, which the tensor cores read in
    place (its contents as of this instruction: the writes before it need a `sync`
    between, as for any shared read by other threads); `a` is a register tile, or a whole
    shared tile (read the same way) when `b` is one.

    A shared `b` may hold `g` matrices, b[g, k, n]: the rows of a and c then form g
    blocks of m / g, and block i is multiplied by b[i] (`out[rows of i] = a[rows of i] @
    b[i] + c[rows of i]`): on Hopper each warpgroup multiplies its rows by its own
    matrix (two warpgroups on two k-tiles of one output tile, say)."""

    opname: ClassVar[str] = "dot"
    out: Tensor
    a: Tensor
    b: Tensor
    c: Tensor

    @property
    def groups(self) -> int:
        """How many matrices `b` holds (1 unless b is [g, k, n])."""
        shape = self.b.type.shape
        return int(shape[0]) if len(shape) == 3 else 1

    @property
    def mnk(self) -> tuple[int, int, int]:
        """(m, n, k): a's rows, b's columns, the shared dimension (static shapes)."""
        m, k = self.a.type.static_shape
        return m, self.b.type.static_shape[-1], k


@dataclass(frozen=True, kw_only=True)
class AnnotateLayout(Instruction):
    """Ask for `tensor` to have `layout` (a hint layout inference must honour)."""

    opname: ClassVar[str] = "annotate_layout"
    tensor: Tensor
    layout: Any


@dataclass(frozen=True, kw_only=True)
class Print(Instruction):
    """Debug print of a tensor or a scalar, prefixed by `message` (block 0 only)."""

    opname: ClassVar[str] = "print"
    value: Tensor | Expr
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class Assume(Instruction):
    """The program promises that the bool expression `cond` holds whenever this point is
    reached. The compiler may use it (`n % 8 == 0` at the top level of the body makes
    `n` a multiple of 8 everywhere); a program that breaks the promise is an error,
    reported by the interpreter and, for conditions over kernel arguments only, by the
    runtime before launch."""

    opname: ClassVar[str] = "assume"
    cond: Expr


INSTRUCTIONS: dict[str, type[Instruction]] = {
    cls.opname: cls for cls in (
        GlobalView, LoadGlobal, StoreGlobal, AtomicAdd, GlobalTimer, TilePost, TileWait,
        AllocShared, FreeShared, LoadShared, StoreShared, CopyAsync, CopyAsyncCommit,
        CopyAsyncWait, Sync, ClusterSync, LaunchDependents, WaitPrerequisites, Full, Arange,
        Assign, View, Cast, Elementwise, Where, Reduce, Dot, AnnotateLayout, Print, Assume,
    )
}
