"""Refactor check (issue: architecture). Compile every example and every quantized-matmul tuning candidate of issue 42's problems
to PTX and write one line per program: `name sha256`, plus the PTX (gzipped) for diffs.

    python ptx_digest.py OUT_DIR [--jobs N]
    python ptx_digest.py --compare BEFORE_DIR AFTER_DIR

Uses only the public entry points that a refactor keeps: backend.compile_program,
kernels.schedule.candidates, kernels.matmul.schedule_kernel, Schedule.constants,
kernels.qmm_dequant.dequantize_kernel.
"""
import gzip, hashlib, importlib.util, multiprocessing as mp, sys
from pathlib import Path

SHAPES = [(1, 12288, 4096), (64, 8192, 28672), (4096, 4096, 4096)]
ARCHES = ["sm_80", "sm_90a"]
WTYPES = ["int4", "int3", "f6e3m2", "int8"]
EXAMPLES = [("vector_add", "vector_add", {}), ("softmax", "softmax_f32", {}),
            ("softmax", "softmax_f16", {}), ("matmul", "matmul", {})] + \
           [("quantized_matmul", "quantized_matmul", {"wdtype": w, "group_size": 128})
            for w in WTYPES]


def jobs():
    from tilevm import dtypes
    from tilevm.kernels.schedule import candidates
    out = []
    for arch in ARCHES:
        for mod, kern, consts in EXAMPLES:
            tag = ",".join(f"{k}={v}" for k, v in consts.items())
            out.append((f"example/{mod}/{kern}[{tag}]/{arch}", ("example", mod, kern, consts), arch))
        for M, N, K in SHAPES:
            for w in WTYPES:
                bits = dtypes.parse(w).bits
                seen = set()
                for s in candidates(M, N, K, 128, hopper=(arch == "sm_90a"), bits=bits):
                    out.append((f"qmm/{M}x{N}x{K}/{w}/{s}/{arch}", ("qmm", w, s, N), arch))
                    if s.dequant and "deq" not in seen:
                        seen.add("deq")
                        out.append((f"qmm/{M}x{N}x{K}/{w}/dequantizer/{arch}", ("deq", w, s, N), arch))
    return out


def program(spec):
    from tilevm import dtypes
    kind = spec[0]
    if kind == "example":
        _, mod, kern, consts = spec
        root = Path(importlib.util.find_spec("tilevm").origin).parent
        sp = importlib.util.spec_from_file_location(f"_ex_{mod}", root / "examples" / f"{mod}.py")
        m = importlib.util.module_from_spec(sp); sp.loader.exec_module(m)
        consts = {k: (dtypes.parse(v) if k == "wdtype" else v) for k, v in consts.items()}
        return getattr(m, kern).specialize(**consts)
    from tilevm.kernels.matmul import schedule_kernel
    from tilevm.kernels.qmm_dequant import dequantize_kernel
    from tilevm.kernels.schedule import k_tile
    _, w, s, N = spec
    wd = dtypes.parse(w)
    if kind == "deq":
        return dequantize_kernel("f16").specialize(wdtype=wd, group_size=128, has_zeros=False,
                                                   bk=k_tile(128))
    wide = {"wide_stores": N % 8 == 0} if s.wgmma else {}
    k = schedule_kernel(s, "f16")
    if s.dequant:
        return k.specialize(**s.constants(), **wide)
    return k.specialize(wdtype=wd, group_size=128, has_zeros=False, **s.constants(), **wide)


def build(job):
    name, spec, arch = job
    from tilevm.backend import compile_program
    try:
        ptx = compile_program(program(spec), arch).ptx
    except Exception as e:  # noqa: BLE001
        ptx = f"ERROR {type(e).__name__}: {e}"
    return name, ptx


def main():
    if sys.argv[1] == "--compare":
        a, b = (dict(l.rsplit(" ", 1) for l in (Path(d) / "digest.txt").read_text().splitlines())
                for d in sys.argv[2:4])
        same = [k for k in a if b.get(k) == a[k]]
        diff = [k for k in a if k in b and b[k] != a[k]]
        miss = sorted(set(a) ^ set(b))
        print(f"{len(a)} before, {len(b)} after: {len(same)} identical, {len(diff)} differ, "
              f"{len(miss)} only on one side")
        for k in diff[:50]: print("DIFF", k)
        for k in miss[:50]: print("ONLY", k)
        sys.exit(0 if not diff and not miss else 1)
    out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
    n = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else 2
    js = jobs()
    print(len(js), "programs", flush=True)
    lines = []
    with mp.get_context("spawn").Pool(n) as pool, gzip.open(out / "ptx.txt.gz", "wt") as z:
        for i, (name, ptx) in enumerate(pool.imap(build, js, chunksize=1)):
            lines.append(f"{name} {hashlib.sha256(ptx.encode()).hexdigest()}")
            z.write(f"==== {name}\n{ptx}\n")
            if i % 25 == 0: print(i, flush=True)
    (out / "digest.txt").write_text("\n".join(lines) + "\n")
    print("done; programs that failed to compile are the ERROR entries of ptx.txt.gz")


if __name__ == "__main__":
    main()
