"""The bound and the prediction (`cost.model`) and `vmc analyze`: each term is its count
over the GPU's ceiling, the bound is the largest, and the command prints the model's
numbers for a compiled kernel."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from kernel_harness import ROOT, vmc

from tilevm import dtypes
from tilevm.bench.examples import load_example
from tilevm.cost import hardware
from tilevm.cost.model import TERMS, Resources, estimate
from tilevm.cost.traffic import analyze_traffic
from tilevm.kernels.matmul_launch import schedule_kernel
from tilevm.kernels.tilings import WGMMA_TILES, wgmma_tile

M, N, K = 512, 384, 256


@pytest.fixture(scope="module")
def matmul():
    return load_example("matmul").matmul.specialize()


def test_terms_are_counts_over_ceilings_and_the_bound_is_the_largest(matmul):
    gpu = hardware.gpu("h100")
    scalars = {"M": M, "N": N, "K": K}
    e = estimate(matmul, scalars, gpu, Resources(128, 64, 0))
    traffic = analyze_traffic(matmul, scalars, l2_bytes=gpu.l2_bytes)
    assert e.traffic == traffic
    # 16 x 12 blocks of 4 warps over 132 SMs: 5.8 warps per SM keep too few bytes in
    # flight for the full bandwidth (8 saturate it)
    resident_warps = min(e.blocks, e.waves.slots) * 4 / gpu.sm_count
    assert e.blocks == 192 and resident_warps < gpu.dram_saturating_warps
    assert e.seconds["dram"] == pytest.approx(
        traffic.dram / (gpu.dram_bandwidth * resident_warps / gpu.dram_saturating_warps))
    assert e.seconds["tensor_core"] == 2 * M * N * K / gpu.tensor_peak
    assert e.seconds["convert"] == 0
    assert e.bound_s == max(e.seconds.values()) == e.seconds[e.bound_term]
    assert e.blocks == math.prod(traffic.grid)
    # the units overlap partly (the largest, plus a fraction of the others); the compute
    # time pays for a partial last wave, the DRAM term does not; the part of the smaller
    # that does not overlap, and each wave's latency, come on top
    quantization = e.waves.waves / (e.blocks / e.waves.slots)
    units = sorted(e.seconds[t] for t in TERMS[1:])
    assert units[0] + units[1] > 0  # (the matmul's fma work: the fraction is exercised)
    compute = (units[2] + gpu.unoverlapped_fraction * (units[0] + units[1])) * quantization
    memory = e.seconds["dram"]
    assert e.predicted_s == pytest.approx(
        max(memory, compute) + gpu.unoverlapped_fraction * min(memory, compute)
        + e.waves.waves * gpu.wave_latency_s)
    assert e.fraction_of_bound(2 * e.bound_s) == 0.5
    with pytest.raises(ValueError, match="positive"):
        e.fraction_of_bound(0.0)


def test_tensor_core_time_by_instruction(matmul):
    """The matmul example's dots multiply register tiles (`mma.sync`): at a GPU whose
    mma.sync reaches half the tensor peak their time doubles; the Hopper kernel's dots
    read x from shared memory (`wgmma`) and keep the peak."""
    scalars = {"M": M, "N": N, "K": K}
    gpu = hardware.gpu("h100")
    half = dataclasses.replace(gpu, mma_sync_fraction=0.5)
    assert gpu.peak("mma_sync") == gpu.tensor_peak  # (1.0 until measured)
    register_dots = estimate(matmul, scalars, half, Resources(128, 64, 0))
    assert register_dots.seconds["tensor_core"] == pytest.approx(
        2 * M * N * K / (0.5 * gpu.tensor_peak))
    s = wgmma_tile(WGMMA_TILES[0], 128)
    qmm = schedule_kernel(s).specialize(wdtype=dtypes.parse("int4"), group_size=128,
                                        has_zeros=False, **s.constants())
    for table in (gpu, half):
        e = estimate(qmm, scalars, table, Resources(128, 168, 65536))
        assert e.seconds["tensor_core"] == pytest.approx(2 * M * N * K / gpu.tensor_peak)


def test_enough_resident_warps_reach_the_full_bandwidth(matmul):
    gpu = hardware.gpu("h100")
    scalars = {"M": 4096, "N": 4096, "K": 64}
    e = estimate(matmul, scalars, gpu, Resources(128, 64, 0))
    assert min(e.blocks, e.waves.slots) * 4 / gpu.sm_count >= gpu.dram_saturating_warps
    assert e.seconds["dram"] == e.traffic.dram / gpu.dram_bandwidth


def test_measured_ceilings_replace_the_tables(matmul):
    gpu = hardware.gpu("h100")
    slower = hardware.with_measured(gpu, copy_bandwidth=gpu.dram_bandwidth / 2)
    scalars = {"M": M, "N": N, "K": K}
    a = estimate(matmul, scalars, gpu, Resources(128, 64, 0))
    b = estimate(matmul, scalars, slower, Resources(128, 64, 0))
    assert b.seconds["dram"] == 2 * a.seconds["dram"]


def test_vmc_analyze_json_has_the_launchs_counts(capsys):
    status, out, err = vmc(capsys, "analyze", str(ROOT / "examples" / "matmul.py"), "--arg",
                           f"M={M}", "--arg", f"N={N}", "--arg", f"K={K}", "--gpu", "h100",
                           "--registers", "64", "--json")
    assert status == 0, err
    report = json.loads(out)
    bm = bn = 32  # the example's default block tile
    assert report["transfers"]["global->register"] == 2 * M * K * (N // bn) + \
        2 * K * N * (M // bm)
    assert report["transfers"]["register->global"] == 2 * M * N  # f16 output
    assert report["flops"]["tensor_core"] == 2 * M * N * K
    assert report["occupancy"]["blocks_per_sm"] >= 1 and report["occupancy"]["waves"] >= 1
    assert report["bound"]["term"] in TERMS and report["predicted_us"] >= report["bound"]["us"]
    assert report["resources"]["registers_per_thread"] == 64


def test_vmc_analyze_errors(capsys):
    path = str(ROOT / "examples" / "matmul.py")
    status, _, err = vmc(capsys, "analyze", path, "--arg", "M=4", "--gpu", "b200")
    assert status == 2 and "b200" in err and "h100" in err
    status, _, err = vmc(capsys, "analyze", path, "--arg", "M=4", "--registers", "64")
    assert status == 2 and "N" in err
    status, _, err = vmc(capsys, "analyze", path, "--arg", "M=4.5", "--registers", "64")
    assert status == 2 and "integers" in err
    # a bad --arg is named as --arg, not as --set
    status, _, err = vmc(capsys, "analyze", path, "--arg", "M=abc", "--registers", "64")
    assert status == 2 and "--arg M: 'abc' is neither a Python literal" in err
    status, _, err = vmc(capsys, "analyze", path, "--arg", "M", "--registers", "64")
    assert status == 2 and "--arg takes name=value" in err


def test_vmc_analyze_takes_measured_ceilings_and_a_measured_time(tmp_path, capsys):
    path = str(ROOT / "examples" / "matmul.py")
    args = [path, "--arg", f"M={M}", "--arg", f"N={N}", "--arg", f"K={K}",
            "--registers", "64", "--json"]
    status, out, err = vmc(capsys, "analyze", *args)
    table = json.loads(out)
    ceilings = tmp_path / "run.json"  # as `vmc bench qmm` writes its report
    ceilings.write_text(json.dumps({"ceilings": {"copy_bw_bytes_per_s": 1.5e12,
                                                 "cublas_f16_tflops": 600.0}}))
    status, out, err = vmc(capsys, "analyze", *args, "--ceilings", str(ceilings),
                           "--measured-us", "100")
    assert status == 0, err
    measured = json.loads(out)
    gpu = hardware.gpu("h100")
    assert measured["seconds"]["dram"] == pytest.approx(
        table["seconds"]["dram"] * gpu.dram_bandwidth / 1.5e12)
    assert measured["seconds"]["tensor_core"] == pytest.approx(2 * M * N * K / 600e12)
    assert measured["fraction_of_bound"] == pytest.approx(measured["bound"]["us"] / 100)
    ceilings.write_text("{}")
    status, _, err = vmc(capsys, "analyze", *args, "--ceilings", str(ceilings))
    assert status == 2 and "copy_bw_bytes_per_s" in err
    status, _, err = vmc(capsys, "analyze", *args, "--measured-us", "-3")
    assert status == 2 and "positive" in err


def test_resources_of_a_loaded_kernel_read_its_threads_registers_and_shared_bytes():
    class Loaded:  # (what `backend.cuda.Kernel` offers)
        num_threads, shared_bytes = 384, 200_000

        def attribute(self, name):
            return {"CU_FUNC_ATTRIBUTE_NUM_REGS": 168}[name]

    assert Resources.of(Loaded()) == Resources(384, 168, 200_000)
