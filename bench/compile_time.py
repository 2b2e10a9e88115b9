"""Cold compile time of kernels, split by stage: `python -m tilevm.bench.compile_time OUT`.

For each configuration: the frontend (Python -> VM IR), the passes, codegen (LLVM IR),
and LLVM (O3 + NVPTX -> PTX), each timed cold in a fresh process state (specialization
and target caches cleared; the on-disk kernel cache is not used). The median of several
repetitions is reported. Writes OUT/compile_time.json and prints a table last.

The configurations: the examples, and the library's quantized matmul (`tilevm.kernels`)
in the schedules its tuner picked on an H100 for decode (M = 1), M = 64 and prefill
(`LIBRARY`): what a user's first call compiles, once per candidate.

Run it pinned to one core for the figure of merit: `taskset -c 0 python -m ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from tilevm import dtypes
from tilevm.backend import pipeline
from tilevm.backend.analysis import target
from tilevm.backend.llvm import codegen, nvptx
from tilevm.bench.examples import load_example
from tilevm.kernels import qmm, qmm_staged, qmm_wgmma, qmm_wgmma_shared
from tilevm.kernels.schedule import Schedule, wgmma
from tilevm.kernels.tilings import default_schedule

EXAMPLES = [
    ("vector_add", "vector_add", {"block": 1024}),
    ("matmul", "matmul", {}),
    ("softmax", "softmax_f32", {}),
    *[("quantized_matmul", "quantized_matmul", {"wdtype": w, "group_size": 128})
      for w in ("int4", "int3", "f6e3m2", "int8")],
]
LIBRARY_TYPES = ("int4", "int3", "f6e3m2", "int8")


def library_schedules(bits: int) -> list[tuple[str, Any]]:
    """(what, schedule) of the quantized matmul that the configurations compile: the
    tuner's picks on an H100 (8B qkv at M = 1, 70B down at M = 64, the Hopper default
    at M = 4096)."""
    return [("M=1", Schedule(8, 64, 4, 4, swap_ab=True)),
            ("M=64", wgmma(64, 4, 4, 128, lead=2, prefetch=2, split_k=4)),
            ("M=4096", default_schedule(4096, 12288, 4096, 128, hopper=True, bits=bits))]


def configs() -> list[tuple[str, Callable[[], Any], dict]]:
    """(name, a fresh kernel, its constants) of every configuration."""
    found = [(" ".join([kernel, *map(str, constants.values())]),
              lambda m=module, k=kernel: getattr(load_example(m), k), constants)
             for module, kernel, constants in EXAMPLES]
    for w in LIBRARY_TYPES:
        for what, s in library_schedules(dtypes.parse(w).bits):
            constants = {"wdtype": w, "group_size": 128, "has_zeros": False,
                         **s.constants(), **({"wide_stores": True} if s.wgmma else {})}
            found.append((f"qmm {w} {what}", _fresh_library_kernel(s), constants))
    return found


def _fresh_library_kernel(s: Any) -> Callable[[], Any]:
    """A maker of the kernel that schedule `s` runs, each time a new one (the kernel
    factories are cached: `__wrapped__` makes one with no cached specialization)."""
    factory = (qmm_staged.qmm_staged_kernel if s.staged else
               qmm_wgmma_shared.qmm_wgmma_shared_kernel if s.shared_weights else
               qmm_wgmma.qmm_wgmma_kernel if s.wgmma else qmm.qmm_kernel)
    return lambda: factory.__wrapped__("f16")


def time_config(name: str, make_kernel: Callable[[], Any], constants: dict, arch: str,
                repeats: int) -> dict:
    """One configuration compiled cold `repeats` times: the median seconds of each stage
    (frontend, passes, codegen, LLVM) and their sum."""
    constants = {k: dtypes.parse(v) if k == "wdtype" else v for k, v in constants.items()}
    stages: dict[str, list[float]] = {"frontend": [], "passes": [], "codegen": [], "llvm": []}
    for _ in range(repeats):
        kernel = make_kernel()  # a fresh kernel: no cached specialization
        nvptx._target_machine.cache_clear()
        t0 = time.perf_counter()
        program = kernel.specialize(**constants)
        t1 = time.perf_counter()
        lowered = pipeline.run_passes(program)
        t2 = time.perf_counter()
        llvm_ir = str(codegen.generate(lowered))
        t3 = time.perf_counter()
        nvptx.emit_ptx(llvm_ir, arch)
        t4 = time.perf_counter()
        for stage, dt in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            stages[stage].append(dt)
    medians = {stage: statistics.median(v) for stage, v in stages.items()}
    return {"name": name, "constants": {k: str(v) for k, v in constants.items()},
            "arch": arch, "seconds": medians, "total_seconds": sum(medians.values()),
            "repeats": repeats}


def main(argv: list[str] | None = None) -> int:
    """Time every configuration (or those `--only` names) and write compile_time.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output folder for compile_time.json")
    parser.add_argument("--arch", default="sm_90",
                        help="the device's arch; kernels are compiled for what runs on it "
                             "(sm_90: sm_90a, whose wgmma the library's prefill kernels use)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", default="",
                        help="time only the configurations whose name contains this")
    args = parser.parse_args(argv)
    arch = target.native_arch(args.arch)
    os.makedirs(args.out, exist_ok=True)
    results = []
    for name, make_kernel, constants in configs():
        if args.only not in name:
            continue
        try:
            results.append(time_config(name, make_kernel, constants, arch, args.repeats))
        except Exception as err:  # a configuration the backend cannot compile yet
            results.append({"name": name,
                            "constants": {k: str(v) for k, v in constants.items()},
                            "error": f"{type(err).__name__}: {str(err).splitlines()[0]}"})
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    report = {"machine": platform.processor() or platform.machine(), "cpus_allowed": affinity,
              "python": sys.version.split()[0], "results": results}
    with open(os.path.join(args.out, "compile_time.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(f"cold compile, median of {args.repeats}, {arch}, {affinity} CPU(s) allowed")
    print(f"{'kernel':<34} {'frontend':>9} {'passes':>8} {'codegen':>8} {'llvm':>8} {'total':>8}")
    for r in results:
        if "error" in r:
            print(f"{r['name']:<34} not compiled: {r['error'][:60]}")
            continue
        s = r["seconds"]
        print(f"{r['name']:<34} {s['frontend']:9.3f} {s['passes']:8.3f} {s['codegen']:8.3f} "
              f"{s['llvm']:8.3f} {r['total_seconds']:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
