"""`vmc analyze`: the cost model of one launch (docs/cost-model.md): bytes per transfer,
FLOPs per unit, occupancy, waves, the bound and the prediction, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from tilevm.backend import pipeline, ptxas
from tilevm.cli.common import CLIError, load_target, parse_setting, settings_of, write_file
from tilevm.cost import hardware
from tilevm.cost.diagram import napkin_svg
from tilevm.cost.liveness import analyze_liveness
from tilevm.cost.model import Estimate, Resources, estimate
from tilevm.ir.errors import VMError

ANALYZE_DESCRIPTION = """\
Count what one launch of a kernel moves and computes, and bound its time, before
anything runs (the cost model, docs/cost-model.md). Compile-time constants are set with
--set, runtime scalars (problem sizes such as M, N, K) with --arg. The kernel is
compiled for the GPU's architecture to learn its shared memory, and ptxas gives its
registers per thread (or --registers).

Output: per block and for the launch, bytes per transfer (global->register,
global->shared, shared->register, register->shared, register->global) and the model's
DRAM bytes after L2 reuse; FLOPs per unit (tensor_core, fma, convert); blocks per SM
and what limits them; waves; the time of each term against the GPU's ceilings, the
bound and its term, and the prediction.
"""


def _scalars(items: list[str] | None) -> dict[str, int]:
    scalars: dict[str, int] = {}
    for item in items or ():
        name, value = parse_setting(item, "--arg")
        if isinstance(value, bool) or not isinstance(value, int):
            raise CLIError(f"--arg {name}: runtime sizes are integers, got {value!r}")
        scalars[name] = value
    return scalars


def _registers(ptx: str, arch: str, name: str) -> int:
    try:
        report = ptxas.check_ptx(ptx, arch)
    except ptxas.PtxasNotFoundError:
        raise CLIError("the register count comes from ptxas, which was not found; install "
                       "it (nvidia-cuda-nvcc) or pass --registers N") from None
    except ptxas.PTXError as err:
        raise CLIError(str(err)) from None
    return report.kernels[name].registers


def _measured_gpu(gpu: hardware.GPU, path: str) -> hardware.GPU:
    """`gpu` with the ceilings a bench run measured (`vmc bench qmm`'s JSON, its
    "ceilings": the copy bandwidth and cuBLAS f16's rate) in place of the table's."""
    try:
        with open(path) as f:
            report = json.load(f)
        ceilings = report["ceilings"] if "ceilings" in report else report
        copy = float(ceilings["copy_bw_bytes_per_s"])
        tensor = float(ceilings["cublas_f16_tflops"]) * 1e12
    except OSError as err:
        raise CLIError(f"cannot read {path}: {err.strerror}") from None
    except (ValueError, KeyError, TypeError) as err:
        raise CLIError(f"{path} holds no measured ceilings (a bench run's JSON with "
                       f"copy_bw_bytes_per_s and cublas_f16_tflops): {err}") from None
    return hardware.with_measured(gpu, copy_bandwidth=copy, tensor_peak=tensor)


def format_table(e: Estimate, name: str) -> str:
    """The estimate as a human-readable table."""
    t = e.traffic
    lines = [f"{name} on {e.gpu.product}: {e.blocks} blocks of {e.resources.threads} "
             f"threads, {e.resources.registers_per_thread} registers per thread, "
             f"{e.resources.shared_bytes} shared bytes"
             + (" (counts approximate: data-dependent branches)" if t.approximate else ""),
             "", f"{'transfer':<20}{'per block':>16}{'launch':>18}"]
    for kind, total in t.total.items():
        label = "dram (after L2)" if kind == "dram" else kind
        lines.append(f"{label:<20}{t.per_block.get(kind, 0):>16,}{total:>18,}")
    lines += ["", f"{'unit':<20}{'operations':>18}"]
    for unit, count in t.flops.items():  # ("mma_sync": the tensor cores' part by mma.sync)
        label = "  of it mma.sync" if unit == "mma_sync" else unit
        lines.append(f"{label:<20}{count:>18,}")
    o, w = e.occupancy, e.waves
    lines += ["", f"occupancy: {o.blocks_per_sm} blocks per SM (limited by "
                  f"{', '.join(o.limited_by)}), {w.waves} wave(s), the last "
                  f"{w.last_wave_utilization:.0%} full", ""]
    for term, seconds in e.seconds.items():
        mark = "  <- bound" if term == e.bound_term else ""
        lines.append(f"{term:<20}{seconds * 1e6:>12.2f} us{mark}")
    lines.append(f"{'predicted':<20}{e.predicted_s * 1e6:>12.2f} us")
    if e.gpu.measured:
        lines.append(f"(measured ceilings: {', '.join(sorted(e.gpu.measured))})")
    return "\n".join(lines)


def cmd_analyze(args: argparse.Namespace) -> int:
    settings = settings_of(args.set)
    scalars = _scalars(args.arg)
    try:
        gpu = hardware.gpu(args.gpu)
    except ValueError as err:
        raise CLIError(str(err)) from None
    if args.ceilings:
        gpu = _measured_gpu(gpu, args.ceilings)
    if args.measured_us is not None and not args.measured_us > 0:
        raise CLIError(f"--measured-us must be a positive time, got {args.measured_us}")
    _, kernel = load_target(args.target)
    try:
        program = kernel.specialize(**settings)
        compiled = pipeline.compile_program(program, gpu.arch)
    except VMError as err:
        raise CLIError(str(err)) from None
    registers = args.registers if args.registers is not None else _registers(
        compiled.ptx, gpu.arch, program.name)
    resources = Resources(compiled.num_threads, registers, compiled.shared_bytes)
    try:
        result = estimate(program, scalars, gpu, resources)
    except (VMError, ValueError) as err:
        raise CLIError(str(err)) from None
    fraction = None if args.measured_us is None else \
        result.fraction_of_bound(args.measured_us * 1e-6)
    if args.json:
        report = result.to_json()
        if fraction is not None:
            report["measured_us"] = args.measured_us
            report["fraction_of_bound"] = fraction
        json.dump(report, sys.stdout, indent=1, sort_keys=True)
        print()
    else:
        print(format_table(result, program.name))
        if fraction is not None:
            print(f"{'measured':<20}{args.measured_us:>12.2f} us: {fraction:.0%} of the bound")
    if args.svg:
        try:
            svg = napkin_svg(program, result.traffic, analyze_liveness(program, scalars))
        except (VMError, ValueError) as err:
            raise CLIError(str(err)) from None
        write_file(args.svg, svg)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The `analyze` command's arguments."""
    p = sub.add_parser(
        "analyze", help="the cost model of a launch: bytes, FLOPs, occupancy, bound",
        description=ANALYZE_DESCRIPTION,
        epilog="examples: vmc analyze examples/matmul.py --arg M=4096 --arg N=4096 "
               "--arg K=4096 --gpu h100\n"
               "          vmc analyze kernels/qmm.py:qmm_f16 --set wdtype=int4 --set "
               "group_size=128 --arg M=1 --arg N=12288 --arg K=4096 --gpu h100 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="FILE.py[:KERNEL]",
                   help="the file, and the kernel's name if the file defines several")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a compile-time constant (a Python literal or a type name); repeatable")
    p.add_argument("--arg", action="append", metavar="NAME=VALUE",
                   help="a runtime scalar argument (an integer size); repeatable")
    p.add_argument("--gpu", default="h100", metavar="GPU",
                   help=f"the GPU's table: {', '.join(hardware.GPUS)} (default h100)")
    p.add_argument("--ceilings", metavar="FILE.json",
                   help="use the ceilings a bench run measured (vmc bench qmm's JSON: copy "
                        "bandwidth, cuBLAS f16 rate) instead of the table's")
    p.add_argument("--measured-us", type=float, metavar="T",
                   help="a measured time of this launch: report the fraction of the bound "
                        "it reaches")
    p.add_argument("--registers", type=int, metavar="N",
                   help="registers per thread (default: ptxas's count)")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.add_argument("--svg", metavar="FILE",
                   help="also write the program's napkin diagram (docs/cost-model.md) to FILE")
    p.set_defaults(func=cmd_analyze)
