"""The machine code of the Hopper kernels reads no wgmma accumulator before the wait
for it: after the last `HGMMA`, no instruction touches its accumulator registers ahead
of the first `WARPGROUP.DEPBAR.LE gsb0, 0x0` (the SASS of `wgmma.wait_group 0`).

Why a test of ptxas' output: the PTX orders the wait before the reads, but ptxas may
schedule the reads above it. It did in a persistent matmul with its own
epilogue tile (tests/programs/persistent_wgmma_kernels.py: the conversions of the
accumulators went ahead of the wait, and the results were wrong on the H100), which
this test keeps as the case it must catch. Needs ptxas and nvdisasm (test extras)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
from kernel_harness import ROOT, compile_once, cuda_tools

from tilevm.dtypes import parse
from tilevm.kernels.qmm_dequant import wt_matmul_kernel
from tilevm.kernels.qmm_streamk import qmm_streamk_kernel
from tilevm.kernels.qmm_wgmma import qmm_wgmma_kernel
from tilevm.kernels.qmm_wgmma_shared import qmm_wgmma_shared_kernel
from tilevm.kernels.tilings import WGMMA_HALF_ATOM_TILES, wgmma_tile

HGMMA = re.compile(r"HGMMA\.64x(\d+)x\d+\.(F32|F16)\S* R(\d+),")


def sass(program, tmp_path: Path) -> list[str]:
    ptxas, nvdisasm = cuda_tools()
    ptx = tmp_path / "k.ptx"
    ptx.write_text(compile_once(program, "sm_90a").ptx)  # test_wgmma.py has some of them
    cubin = tmp_path / "k.cubin"
    subprocess.run([ptxas, "-arch=sm_90a", str(ptx), "-o", str(cubin)], check=True)
    return subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True,
                          check=True).stdout.splitlines()


def early_reads(lines: list[str]) -> list[str]:
    """The instructions after the last HGMMA that use its accumulator registers before
    the first full wait for it (in program order)."""
    last = max(i for i, line in enumerate(lines) if HGMMA.search(line))
    n, kind, base = HGMMA.search(lines[last]).groups()
    count = int(n) * 64 // 128 // (1 if kind == "F32" else 2)  # registers a thread
    accumulators = range(int(base), int(base) + count)
    found = []
    for line in lines[last + 1:]:
        if "DEPBAR.LE gsb0, 0x0" in line:
            return found
        if "HGMMA" in line or "WARPGROUP" in line:
            continue
        if any(int(r) in accumulators for r in re.findall(r"\bR(\d+)\b", line)):
            found.append(line.strip())
    return found


# Every kernel in both store forms (`wide_stores`), over weight types whose conversions
# differ (codes within 32-bit words and across them, integers and floats): the weight type
# changes the main loop's code, hence how ptxas schedules the epilogue's reads.
KERNELS = [(f"{name} {wd} wide={wide}", factory, dict(wdtype=wd, wide_stores=wide))
           for name, factory in (("register-A", qmm_wgmma_kernel),
                                 ("shared-weights", qmm_wgmma_shared_kernel))
           for wd in ("int4", "int3", "int8", "f6e3m2") for wide in (False, True)]
KERNELS += [(f"register-A half atoms {wd} wide={wide}", qmm_wgmma_kernel,
             dict(wdtype=wd, wide_stores=wide, **wgmma_tile(WGMMA_HALF_ATOM_TILES[0], 128,
                                                          half_atoms=True).constants()))
            for wd in ("int8", "f8e4m3", "f6e3m2") for wide in (False, True)]
KERNELS += [(f"stream-K {wd} half_atoms={half}", qmm_streamk_kernel,
             dict(wdtype=wd, bm=64, stages=4, lead=2, prefetch=4 if half else 2,
                  half_atoms=half))
            for wd in ("int4", "int3", "int8", "f6e3m2") for half in (False, True)
            if not half or parse(wd).bits % 2 == 0]
KERNELS += [(f"register-A pair_k {wd} wide={wide}", qmm_wgmma_kernel,
             dict(wdtype=wd, wide_stores=wide, bm=64, num_warps=8, stages=4, lead=2,
                  prefetch=4, half_atoms=True, pair_k=True))
            for wd in ("int4", "f6e3m2") for wide in (False, True)]
KERNELS += [(f"wt_matmul {kw}", lambda _act: wt_matmul_kernel("f16"), kw)
            for kw in ({}, {"wide_stores": True}, {"producer": True, "lead": 3},
                       {"producer": True, "wide_stores": True, "cluster": 2})]


@pytest.mark.parametrize("name, factory, kw", KERNELS, ids=[k[0] for k in KERNELS])
def test_no_accumulator_is_read_before_its_wait(name, factory, kw, tmp_path):
    if "wdtype" in kw:
        kw = {**kw, "wdtype": parse(kw["wdtype"])}
    program = factory("f16").specialize(**kw)
    assert early_reads(sass(program, tmp_path)) == [], name


def test_the_check_catches_the_persistent_kernel_ptxas_got_wrong(tmp_path):
    path = ROOT / "tests/programs/persistent_wgmma_kernels.py"
    spec = importlib.util.spec_from_file_location("pp3", path)
    pp3 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pp3)
    reads = early_reads(sass(pp3.persistent_kernel("f16", 40).specialize(), tmp_path))
    assert reads and all("F2FP" in r for r in reads[:4])
    # its direct-store form was right on the GPU, and the check passes it
    direct = pp3.persistent_kernel("f16", 40).specialize(direct=True)
    assert early_reads(sass(direct, tmp_path)) == []
