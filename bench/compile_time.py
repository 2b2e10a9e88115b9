"""Cold compile time of kernels, split by stage: `python -m tilevm.bench.compile_time OUT`.

For each configuration: the frontend (Python -> VM IR), the passes, codegen (LLVM IR),
and LLVM (O3 + NVPTX -> PTX), each timed cold in a fresh process state (specialization
and target caches cleared; the on-disk kernel cache is not used). The median of several
repetitions is reported. Writes OUT/compile_time.json and prints a table last.

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

from tilevm.bench.examples import load_example

CONFIGS = [
    ("vector_add", "vector_add", {"block": 1024}),
    ("matmul", "matmul", {}),
    ("softmax", "softmax_f32", {}),
    *[("quantized_matmul", "quantized_matmul", {"wdtype": w, "group_size": 128})
      for w in ("int4", "int3", "f6e3m2", "int8")],
]


def time_config(module_name: str, kernel_name: str, constants: dict, arch: str,
                repeats: int) -> dict:
    from tilevm import dtypes
    from tilevm.backend import codegen, pipeline, target

    constants = {k: dtypes.parse(v) if k == "wdtype" else v for k, v in constants.items()}
    stages: dict[str, list[float]] = {"frontend": [], "passes": [], "codegen": [], "llvm": []}
    for _ in range(repeats):
        # a fresh kernel: no cached specialization
        kernel = getattr(load_example(module_name), kernel_name)
        target._target_machine.cache_clear()
        t0 = time.perf_counter()
        program = kernel.specialize(**constants)
        t1 = time.perf_counter()
        lowered = pipeline.run_passes(program)
        t2 = time.perf_counter()
        llvm_ir = str(codegen.generate(lowered))
        t3 = time.perf_counter()
        target.emit_ptx(llvm_ir, arch)
        t4 = time.perf_counter()
        for name, dt in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            stages[name].append(dt)
    medians = {name: statistics.median(v) for name, v in stages.items()}
    return {"example": module_name, "kernel": kernel_name,
            "constants": {k: str(v) for k, v in constants.items()}, "arch": arch,
            "seconds": medians, "total_seconds": sum(medians.values()), "repeats": repeats}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output folder for compile_time.json")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    results = []
    for module_name, kernel_name, constants in CONFIGS:
        try:
            results.append(time_config(module_name, kernel_name, constants, args.arch,
                                       args.repeats))
        except Exception as err:  # a configuration the backend cannot compile yet
            results.append({"example": module_name, "kernel": kernel_name,
                            "constants": {k: str(v) for k, v in constants.items()},
                            "error": f"{type(err).__name__}: {str(err).splitlines()[0]}"})
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    report = {"machine": platform.processor() or platform.machine(), "cpus_allowed": affinity,
              "python": sys.version.split()[0], "results": results}
    with open(os.path.join(args.out, "compile_time.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(f"cold compile, median of {args.repeats}, {args.arch}, {affinity} CPU(s) allowed")
    print(f"{'kernel':<34} {'frontend':>9} {'passes':>8} {'codegen':>8} {'llvm':>8} {'total':>8}")
    for r in results:
        name = r["kernel"] + "".join(f" {v}" for v in r["constants"].values())
        if "error" in r:
            print(f"{name:<34} not compiled: {r['error'][:60]}")
            continue
        s = r["seconds"]
        print(f"{name:<34} {s['frontend']:9.3f} {s['passes']:8.3f} {s['codegen']:8.3f} "
              f"{s['llvm']:8.3f} {r['total_seconds']:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
