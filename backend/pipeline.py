"""The compiler pipeline: the passes, in order, and `compile_program`.

    verify -> infer_layouts -> convert_layouts -> plan_shared_memory
           -> vectorize_memory -> select_instructions -> lower_bit_packing
           -> split_producer_warp -> codegen (LLVM IR) -> LLVM O3 + NVPTX (PTX)

Each pass is one module of backend/passes/ whose docstring says what it expects and
guarantees, and each is `run(program, context)` with the same `PassContext` (the
target); `vmc compile --dump-after NAME` prints the IR after any of them. The first
four shape the program (layouts, conversions, shared-memory placement); the next three
decide how each instruction becomes machine code and record it in the instruction's
`lowering` field, which codegen (backend/llvm/) then emits: no decision is left to
codegen. The last gives a program's TMA copies a warp of their own, where it asks for
one. Shared-memory planning runs before the lowering decisions because they read its
result: vector widths and `ldmatrix` need each shared tensor's layout and offset.
Facts the passes and codegen read (the shared-memory plan, tensor maps, ...) are
computed once per program by backend/analysis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilevm.backend.analysis import target
from tilevm.backend.analysis.shared_memory import shared_plan
from tilevm.backend.analysis.tma import tensor_maps
from tilevm.backend.llvm import codegen, nvptx
from tilevm.backend.passes.context import PassContext
from tilevm.backend.passes.convert_layouts import convert_layouts
from tilevm.backend.passes.infer_layouts import infer_layouts
from tilevm.backend.passes.lower_bit_packing import lower_bit_packing
from tilevm.backend.passes.plan_shared_memory import plan_shared_memory
from tilevm.backend.passes.select_instructions import select_instructions
from tilevm.backend.passes.split_producer_warp import split_producer_warp
from tilevm.backend.passes.vectorize_memory import vectorize_memory
from tilevm.backend.passes.verify import verify
from tilevm.ir.errors import VMError
from tilevm.ir.printer import format_instruction
from tilevm.ir.stmt import Program
from tilevm.ir.transform import instructions

Pass = Callable[[Program, PassContext], Program]

PASSES: tuple[tuple[str, Pass], ...] = (
    ("verify", verify),
    ("infer_layouts", infer_layouts),
    ("convert_layouts", convert_layouts),
    ("plan_shared_memory", plan_shared_memory),
    ("vectorize_memory", vectorize_memory),
    ("select_instructions", select_instructions),
    ("lower_bit_packing", lower_bit_packing),
    ("split_producer_warp", split_producer_warp),
)
PASS_NAMES = tuple(name for name, _ in PASSES)


@dataclass(frozen=True)
class CompiledKernel:
    name: str
    arch: str
    ptx: str
    llvm_ir: str
    lowered: Program  # the IR after the last pass
    num_threads: int
    shared_bytes: int


def run_passes(program: Program, dump_after: str | None = None,
               on_dump: Callable[[str, Program], None] | None = None,
               arch: str | None = None) -> Program:
    """The program after every pass (calling `on_dump(name, program)` after `dump_after`);
    `arch` is the target the passes select instructions for (`PassContext`: TMA on
    sm_90a, say), None for none in particular."""
    if dump_after is not None and dump_after not in PASS_NAMES:
        raise ValueError(f"no pass named {dump_after!r}; passes: {', '.join(PASS_NAMES)}")
    context = PassContext(arch)
    for name, run in PASSES:
        program = run(program, context)
        if name == dump_after and on_dump is not None:
            on_dump(name, program)
    return program


def compile_program(program: Program, arch: str = "sm_80", opt: int = 3) -> CompiledKernel:
    """Program -> PTX for `arch` (see the module docstring)."""
    target.target(arch)  # an unknown arch fails before any work
    lowered = run_passes(program, arch=arch)
    _check_arch(lowered, arch)
    llvm_ir = str(codegen.generate(lowered))
    ptx = _describe_tensor_maps(lowered) + nvptx.emit_ptx(llvm_ir, arch, opt)
    return CompiledKernel(program.name, arch, ptx, llvm_ir, lowered, program.block_threads,
                          shared_plan(lowered).total_bytes)


def _describe_tensor_maps(program: Program) -> str:
    """PTX comment lines naming what each tensor-map parameter must hold (for a launch
    other than tilevm's, which encodes them itself: `cuda.tensor_maps`)."""
    first = len(program.params)
    return "".join(
        f"// tilevm: parameter {first + i} is a CUtensorMap of view %{m.view}: dims "
        f"{list(m.dims)} (innermost first), box {list(m.box)}, swizzle {m.swizzle or 'none'}"
        f"{'B' if m.swizzle else ''}, zero fill\n" for i, m in enumerate(tensor_maps(program)))


def _check_arch(program: Program, arch: str) -> None:
    """Instructions that exist on some architectures only, and the shared memory the
    arch gives a block: a clear error at their line."""
    plan, limit = shared_plan(program), target.SHARED_BYTES_PER_BLOCK[arch]
    if plan.total_bytes > limit:
        largest = max(plan.allocations.values(), key=lambda a: a.size, default=None)
        site = next((i for i in instructions(program.body) if largest is not None
                     and getattr(i, "out", None) is not None
                     and getattr(i.out, "name", None) == largest.name), None)
        raise VMError(f"the block's shared memory takes {plan.total_bytes} bytes, more than "
                      f"{arch} gives a block ({limit} bytes)"
                      + (f"; the largest tensor is %{largest.name} ({largest.size} bytes)"
                         if largest is not None else ""),
                      None if site is None else format_instruction(site),
                      None if site is None else site.loc)
    if program.cluster > 1 and target.target(arch).sm < 90:
        raise VMError(f"tv.cluster({program.cluster}) runs blocks in clusters, which need "
                      f"sm_90 or newer; compiling for {arch}", None, program.cluster_loc)
    for inst in instructions(program.body):
        if inst.lowering is not None and inst.lowering.name == "wgmma" and arch != "sm_90a":
            raise VMError(f"dot with a shared b lowers to wgmma (Hopper's warpgroup MMA), "
                          f"which needs --arch sm_90a; compiling for {arch}",
                          format_instruction(inst), inst.loc)
