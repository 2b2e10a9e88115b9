"""The quantized matmul benchmark's pure pieces (bench/qmm.py and the modules beside
it): the roofline and traffic formulas against hand-computed numbers, option parsing and
presets, the run plan, what each backend can run, the tables, the GPU weight generator
and packer against the example's format (with CPU torch, when installed), and a clean
skip without a GPU. One GPU test runs a tiny benchmark end to end."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from kernel_harness import cuda_torch

from tilevm import dtypes
from tilevm.bench import (
    baselines,
    measure,
    output,
    protocol,
    qmm,
    roofline,
    tilevm_adapter,
    weights,
)
from tilevm.cli import main as vmc_main

# ---- formulas -----------------------------------------------------------------------------

def test_traffic_bytes_of_the_int4_decode_layer():
    # 8B qkv, int4, g128, M=1: weights 12288*4096/2, scales 12288*32*2, x 2*4096, y 2*12288.
    assert roofline.traffic_bytes(1, 12288, 4096, 4, 128) == 25_165_824 + 786_432 + 8_192 + 24_576
    assert roofline.traffic_bytes(1, 12288, 4096, 4, 128) == 25_985_024


def test_traffic_bytes_of_a_three_bit_prefill_layer():
    # 70B down, int3, M=4096: 88,080,384 + 3,670,016 + 234,881,024 + 67,108,864.
    assert roofline.traffic_bytes(4096, 8192, 28672, 3, 128) == 393_740_288


def test_traffic_bytes_without_scales_is_cublas_sixteen_bit_weights():
    assert roofline.traffic_bytes(1, 4096, 4096, 16, None) == 2 * 4096 * 4096 + 2 * 4096 + 2 * 4096
    assert roofline.traffic_bytes(1, 4096, 4096, 16, None) == 33_570_816
    # Scale bytes are a parameter: bf16 and f16 scales cost 2, an f32 scale 4.
    assert roofline.traffic_bytes(1, 8, 128, 4, 128, scale_bytes=4) == 512 + 32 + 256 + 16


def test_flops_count_a_multiply_add_as_two():
    assert roofline.matmul_flops(1, 12288, 4096) == 100_663_296
    assert roofline.matmul_flops(8192, 8192, 8192) == 2 * 8192 ** 3


def test_roofline_of_a_memory_bound_decode_kernel():
    copy_bw, peak = 3.0e12, 680e12
    nbytes, flops = 25_985_024, 100_663_296
    t_roof = roofline.roofline_seconds(nbytes, flops, copy_bw, peak)
    assert t_roof == pytest.approx(8.661675e-6, rel=1e-6)  # bytes / bandwidth
    m = roofline.metrics(2 * t_roof, nbytes, flops, copy_bw, peak)
    assert m["bound"] == "memory"
    assert m["roofline_fraction"] == pytest.approx(0.5)
    assert m["tbps"] == pytest.approx(1.5)  # half of the copy bandwidth
    assert m["us"] == pytest.approx(17.32335, rel=1e-6)
    assert m["tflops"] == pytest.approx(flops / (2 * t_roof) / 1e12)


def test_roofline_of_a_compute_bound_prefill_matmul():
    copy_bw, peak = 3.0e12, 680e12
    flops = roofline.matmul_flops(4096, 8192, 8192)
    nbytes = roofline.traffic_bytes(4096, 8192, 8192, 16, None)
    assert nbytes == 268_435_456
    t_roof = roofline.roofline_seconds(nbytes, flops, copy_bw, peak)
    assert t_roof == pytest.approx(549_755_813_888 / 680e12)  # 808.5 us, not 89.5 us
    m = roofline.metrics(1e-3, nbytes, flops, copy_bw, peak)
    assert m["bound"] == "compute"
    assert m["roofline_fraction"] == pytest.approx(0.80846, rel=1e-4)
    assert m["tflops"] == pytest.approx(549.755813888)


def test_finish_row_adds_speedups_over_cublas_of_the_same_shape_activation_and_method():
    ceilings = {"copy_bw_bytes_per_s": 3.0e12, "cublas_f16_tflops": 680.0}
    row = {"backend": "tilevm", "shape": "8b.qkv", "N": 12288, "K": 4096, "M": 1,
           "wdtype": "int4", "act": "f16", "group_size": 128, "bits": 4, "seconds": 16e-6,
           "method": "graph"}
    cublas = {("8b.qkv", 1, "f16", "graph"): 48e-6, ("8b.qkv", 16, "f16", "graph"): 1.0,
              ("8b.qkv", 1, "f16", "isolated"): 64e-6}
    roofline.finish_row(row, ceilings, cublas)
    assert row["speedup_vs_cublas_f16"] == pytest.approx(3.0)
    assert row["speedup_vs_cublas"] == pytest.approx(3.0)
    assert row["speedup_vs_cublas_bf16"] is None  # not measured
    assert row["bytes"] == 25_985_024
    assert row["roofline_fraction"] == pytest.approx(8.661675e-6 / 16e-6, rel=1e-6)
    untimed = {"backend": "tilevm", "seconds": None, "status": "fail"}
    assert roofline.finish_row(dict(untimed), ceilings, cublas) == untimed
    isolated = roofline.finish_row(dict(row, method="isolated"), ceilings, cublas)
    assert isolated["speedup_vs_cublas"] == pytest.approx(4.0)


def test_read_floor_metrics_compare_the_kernel_and_the_roofline_with_the_floor():
    ceilings = {"copy_bw_bytes_per_s": 3.0e12, "cublas_f16_tflops": 680.0}
    row = {"backend": "tilevm", "shape": "8b.qkv", "N": 12288, "K": 4096, "M": 1,
           "wdtype": "int4", "act": "f16", "group_size": 128, "bits": 4, "seconds": 16e-6}
    roofline.finish_row(row, ceilings, {})
    roofline.add_read_floor(row, 12e-6)
    assert row["floor_us"] == pytest.approx(12.0)
    assert row["floor_fraction"] == pytest.approx(12 / 16)
    # a kernel that only read the 25.985 MB took 12 us: 8.66 us of roofline over it
    assert row["attainable_roofline"] == pytest.approx(25_985_024 / 3.0e12 / 12e-6)


def test_the_read_floor_is_opt_in():
    assert protocol.parse_options(["out"]).read_floor is False
    assert protocol.parse_options(["out", "--read-floor"]).read_floor is True


# ---- options and plan ----------------------------------------------------------------------

def test_default_preset_is_the_8b_layers_and_ragged_n_in_f16_under_a_budget():
    o = protocol.parse_options(["out"])
    assert o.preset == "default"
    assert [s[0] for s in o.shapes] == ["8b.qkv", "8b.o", "8b.gate_up", "8b.down", "ragged_n"]
    assert o.m == [1, 16, 17, 64, 256, 4096]
    assert o.dtypes == protocol.WEIGHT_TYPES and len(o.dtypes) == 16
    assert o.act == ["f16"] and o.backends == ["tilevm", "cublas", "gemlite", "humming"]
    assert o.group_size == 128 and o.min_reps == 100 and o.budget_s == 480
    assert o.gemlite_dtypes == ["int4"] and o.humming_dtypes == ["int4", "int3", "f6e3m2"]
    assert o.l2_flush == "write"  # as triton.testing.do_bench flushes


def test_methods_are_graph_and_isolated_by_default_or_as_chosen():
    assert protocol.parse_options(["out"]).methods == ["graph", "isolated"]
    assert protocol.parse_options(["out", "--methods", "graph"]).methods == ["graph"]


def test_the_l2_flush_is_write_or_read():
    assert protocol.parse_options(["out", "--l2-flush", "read"]).l2_flush == "read"
    assert protocol.parse_options(["out", "--l2-flush", "write"]).l2_flush == "write"


def test_quick_and_full_presets():
    q = protocol.parse_options(["out", "--quick"])
    assert [s[0] for s in q.shapes] == ["8b.qkv"] and q.m == [1, 17, 4096]
    assert q.dtypes == ["int4", "int3", "f6e3m2"] and q.humming_dtypes == ["int4"]
    f = protocol.parse_options(["out", "--full"])
    assert len(f.shapes) == 9 and f.act == ["f16", "bf16"] and f.budget_s == 0
    assert f.gemlite_dtypes == f.humming_dtypes == protocol.WEIGHT_TYPES
    assert ("70b.gate_up", 57344, 8192) in f.shapes and ("ragged_n", 4104, 4096) in f.shapes
    with pytest.raises(SystemExit) as err:
        protocol.parse_options(["out", "--quick", "--full"])
    assert err.value.code == 2


def test_explicit_selections_override_the_preset():
    o = protocol.parse_options(["out", "--quick", "--shapes", "70b,8b.o,8b.o,1000x512",
                           "--m", "4096,1,1", "--dtypes", "f8e5m2,int2", "--act", "all",
                           "--backends", "tilevm", "--budget-s", "0", "--group-size", "64"])
    assert o.shapes == [("70b.qkv", 10240, 8192), ("70b.o", 8192, 8192),
                        ("70b.gate_up", 57344, 8192), ("70b.down", 8192, 28672),
                        ("8b.o", 4096, 4096), ("1000x512", 1000, 512)]
    assert o.m == [1, 4096]
    assert o.dtypes == ["f8e5m2", "int2"] and o.act == ["f16", "bf16"]
    assert o.backends == ["tilevm"] and o.budget_s == 0 and o.group_size == 64


@pytest.mark.parametrize("argv", [["--m", "0"], ["--m", "x"], ["--shapes", "9b.qkv"],
                                  ["--shapes", "12x"], ["--dtypes", "int9"],
                                  ["--act", "f32"], ["--backends", "cutlass"],
                                  ["--group-size", "0"], ["--min-reps", "0"],
                                  ["--l2-flush", "none"], ["--methods", "eager"]])
def test_bad_options_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as err:
        protocol.parse_options(["out", *argv])
    assert err.value.code == 2
    assert "error" in capsys.readouterr().err


def test_plan_runs_cublas_first_then_each_weight_type_per_shape():
    o = protocol.parse_options(["out", "--shapes", "8b.qkv,ragged_n", "--m", "1,16",
                           "--dtypes", "int4,f6e3m2", "--act", "f16,bf16",
                           "--gemlite-dtypes", "all", "--backends", "tilevm,cublas,gemlite"])
    configs = protocol.plan(o)
    # Per shape: cuBLAS 2 acts x 2 M, then 2 types x 2 acts x 2 M x (tilevm, gemlite).
    assert len(configs) == 2 * (4 + 16)
    first = configs[:20]
    assert [c.backend for c in first[:4]] == ["cublas"] * 4
    assert {(c.act, c.M, c.wdtype) for c in first[:4]} == \
        {("f16", 1, "f16"), ("f16", 16, "f16"), ("bf16", 1, "bf16"), ("bf16", 16, "bf16")}
    assert all(c.shape == "8b.qkv" and (c.N, c.K) == (12288, 4096) for c in first)
    assert [c.backend for c in first[4:6]] == ["tilevm", "gemlite"]
    assert configs[20].shape == "ragged_n" and configs[20].backend == "cublas"
    assert [c.bits for c in first[3:6]] == [16, 4, 4]
    # By default gemlite (a Triton compile per shape and M) is timed on int4 only, Humming
    # (an nvcc compile per type and shape) on int4, int3 and f6e3m2.
    default = protocol.plan(protocol.parse_options(["out", "--shapes", "8b.o", "--m", "1",
                                          "--dtypes", "int4,int8,f6e3m2"]))
    assert [(c.backend, c.wdtype) for c in default] == [
        ("cublas", "f16"), ("tilevm", "int4"), ("gemlite", "int4"), ("humming", "int4"),
        ("tilevm", "int8"), ("tilevm", "f6e3m2"), ("humming", "f6e3m2")]
    chosen = protocol.plan(protocol.parse_options(["out", "--shapes", "8b.o", "--m", "1",
                                         "--dtypes", "int4,int8", "--humming-dtypes",
                                         "int8", "--backends", "humming"]))
    assert [(c.backend, c.wdtype) for c in chosen] == [("humming", "int8")]
    cublas_only = protocol.parse_options(["out", "--quick", "--backends", "cublas"])
    assert protocol.plan(cublas_only) == [
        protocol.Config("cublas", "8b.qkv", 12288, 4096, m, "f16", "f16", None)
        for m in (1, 17, 4096)]


def test_a_row_names_backend_shape_sizes_weight_type_and_method():
    """Issue 48's row schema: backend, shape, M, N, K, dtype (the weight type), method;
    `us` comes with the timing (`finish_row`)."""
    c = protocol.Config("tilevm", "8b.qkv", 12288, 4096, 16, "int3", "f16", 128)
    row = qmm._base_row(c)
    assert {k: row[k] for k in ("backend", "shape", "M", "N", "K", "dtype", "method")} == \
        {"backend": "tilevm", "shape": "8b.qkv", "M": 16, "N": 12288, "K": 4096,
         "dtype": "int3", "method": "isolated"}


# ---- what each backend runs ------------------------------------------------------------------

def test_example_kernel_support_and_reasons():
    assert tilevm_adapter.example_unsupported("int4", 128, "f16", 12288, 4096) is None
    assert tilevm_adapter.example_unsupported("f8e5m2", 128, "f16", 4104, 4096) is None  # ragged N
    assert "f16 activations" in tilevm_adapter.example_unsupported("int4", 128, "bf16", 4096, 4096)
    assert "N % 8" in tilevm_adapter.example_unsupported("int4", 128, "f16", 4100, 4096)
    assert "K % group_size" in tilevm_adapter.example_unsupported("int4", 128, "f16", 4096, 4000)
    assert "bk" in tilevm_adapter.example_unsupported("int4", 48, "f16", 4096, 4800)
    assert all(tilevm_adapter.example_unsupported(t, 128, "f16", 4096, 4096) is None
               for t in protocol.WEIGHT_TYPES)


def test_gemlite_runs_only_integer_weights_of_its_widths():
    assert baselines.gemlite_unsupported("int4", 128, "bf16", 4096, 4096) is None
    assert baselines.gemlite_unsupported("uint2", 128, "f16", 4104, 4096) is None
    assert "int3" in baselines.gemlite_unsupported("int3", 128, "f16", 4096, 4096)
    assert "f4e2m1" in baselines.gemlite_unsupported("f4e2m1", 128, "f16", 4096, 4096)
    assert "K % 32" in baselines.gemlite_unsupported("int4", 128, "f16", 4096, 4000)
    assert sorted(baselines.GEMLITE_BITS) == ["int2", "int4", "int8", "uint2", "uint4"]


def test_humming_names_every_protocol_type_and_needs_whole_groups():
    assert baselines.humming_dtype("f6e3m2") == "float6e3m2"
    assert [baselines.humming_dtype(t) for t in ("int3", "uint4")] == ["int3", "uint4"]
    assert all(re.fullmatch(r"u?int\d+|float\d+e\d+m\d+", baselines.humming_dtype(t))
               for t in protocol.WEIGHT_TYPES)
    assert baselines.humming_unsupported("int4", 128, "f16", 4104, 4096) is None
    assert "K % group_size" in baselines.humming_unsupported("int4", 128, "f16", 4096, 4000)


def test_a_peer_that_does_not_import_says_why_and_how_to_install(monkeypatch):
    monkeypatch.setitem(baselines.PEER_MODULES, "humming", "tilevm_no_such_peer")
    monkeypatch.setattr(baselines, "_STATUS", {})
    info = baselines.peer_status("humming")
    assert info["available"] is False and "ModuleNotFoundError" in info["reason"]
    assert "--install-wheels" in info["how"]
    with pytest.raises(measure.Unsupported, match="humming unavailable: ModuleNotFoundError"):
        baselines._require("humming")


# ---- tables ---------------------------------------------------------------------------------

def _row(backend, M, status="ok", speed=1.52, frac=0.31, wdtype="int4", **extra):
    row = {"backend": backend, "shape": "8b.qkv", "N": 12288, "K": 4096, "M": M,
           "wdtype": wdtype, "act": "f16", "group_size": 128, "method": "graph",
           "status": status,
           "check_passed": {"ok": True, "fail": False}.get(status),
           "speedup_vs_cublas": speed if status == "ok" else None,
           "speedup_vs_cublas_f16": speed if status == "ok" else None,
           "roofline_fraction": frac if status == "ok" else None,
           "us": 31.25 if status == "ok" else None, "max_rel_err": 1e-4, "reason": None}
    row.update(extra)
    return row


def test_summary_pivots_results_by_m():
    results = [_row("cublas", 1, speed=1.0, frac=0.62, wdtype="f16"),
               _row("tilevm", 1), _row("tilevm", 4096, status="fail"),
               _row("tilevm", 17, status="skip"), _row("gemlite", 1, status="error")]
    text = output.format_summary(results, {"copy_bw_bytes_per_s": 3.01e12,
                                        "cublas_f16_tflops": 683.4})
    lines = text.splitlines()
    assert lines[0] == "ceilings: copy 3.01 TB/s, cuBLAS f16 683 TFLOP/s at 8192^3"
    header = next(line for line in lines if line.startswith("backend"))
    assert header.split()[4:] == ["method", "M=1", "M=17", "M=4096"]
    tilevm = next(line for line in lines if line.startswith("tilevm"))
    assert tilevm.split() == ["tilevm", "8b.qkv", "int4", "f16", "graph", "1.52x", "31%", "-",
                              "FAIL"]
    assert next(line for line in lines if line.startswith("cublas")).split()[5:] == \
        ["1.00x", "62%"]
    assert next(line for line in lines if line.startswith("gemlite")).split()[5:] == ["ERR"]
    assert lines[-1] == "2 ok, 1 fail, 1 error, 1 skip"
    # the same kernel timed the other way is a row of its own
    both = output.format_summary(results + [_row("tilevm", 1, method="isolated", speed=1.4)])
    assert [line.split()[4:6] for line in both.splitlines() if line.startswith("tilevm")] == \
        [["graph", "1.52x"], ["isolated", "1.40x"]]


def test_markdown_table_has_every_row_and_escapes_pipes():
    report = {"date": "2026-11-21", "results": [
        _row("tilevm", 1, tbps=1.234, tflops=6.5),
        _row("tilevm", 16, status="skip", reason="a|b")],
        "ceilings": {"copy_bw_bytes_per_s": 3e12, "cublas_f16_tflops": 680.0},
        "compile": [{"wdtype": "int4", "group_size": 128, "cold_s": 0.4321, "cached_s": None,
                     "via": "examples/quantized_matmul.py"}]}
    md = output.format_markdown(report)
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| backend"))
    assert header.count("|") == len(output.MD_COLUMNS) + 1
    rows = [line for line in lines if line.startswith("| tilevm")]
    assert len(rows) == 2
    cells = [c.strip() for c in rows[0].strip("|").split(" | ")]
    assert cells[:10] == ["tilevm", "8b.qkv", "12288", "4096", "1", "int4", "f16", "graph",
                          "pass", "1.00e-04"]
    assert cells[10:14] == ["31.2", "1.23", "6.5", "1.52"]
    assert cells[15] == "31.0%"
    assert rows[1].endswith("| a\\|b |")
    assert "| int4 | 128 | 0.432 | - | examples/quantized_matmul.py |" in md
    assert "Ceilings: device copy 3.00 TB/s" in md


def test_jsonable_writes_strict_json():
    value = {"a": float("nan"), "b": [1.5, float("inf"), (2, 3)], 4: np.float32(0.5),
             "c": np.int64(7)}
    out = output.jsonable(value)
    assert out == {"a": None, "b": [1.5, None, [2, 3]], "4": 0.5, "c": 7}
    json.dumps(out, allow_nan=False)


# ---- without a GPU ----------------------------------------------------------------------------

def test_the_harness_skips_cleanly_without_a_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(qmm, "gpu_unavailable_reason", lambda: "no CUDA device (test)")
    out = tmp_path / "o"
    assert qmm.main([str(out), "--quick"]) == 0
    report = json.loads((out / "qmm.json").read_text())
    assert report["status"] == "skipped" and report["reason"] == "no CUDA device (test)"
    assert report["results"] == [] and report["options"]["preset"] == "quick"
    assert report["plot"] == {"skipped": "nothing was timed"}
    assert "Skipped: no CUDA device (test)" in (out / "qmm.md").read_text()
    assert "skipped: no CUDA device (test)" in capsys.readouterr().out


def test_vmc_bench_qmm_forwards_to_the_benchmark(tmp_path, monkeypatch):
    monkeypatch.setattr(qmm, "gpu_unavailable_reason", lambda: "no CUDA device (test)")
    assert vmc_main(["bench", "qmm", str(tmp_path), "--m", "1,16", "--dtypes", "int3"]) == 0
    options = json.loads((tmp_path / "qmm.json").read_text())["options"]
    assert options["m"] == [1, 16] and options["dtypes"] == ["int3"]
    with pytest.raises(SystemExit) as err:
        vmc_main(["bench", "qmm", str(tmp_path), "--m", "zero"])
    assert err.value.code == 2


def test_gpu_unavailable_reason_names_the_missing_piece():
    try:
        import torch
    except ImportError:
        assert "torch" in qmm.gpu_unavailable_reason()
        return
    if torch.cuda.is_available():
        assert qmm.gpu_unavailable_reason() is None
    else:
        assert "CUDA" in qmm.gpu_unavailable_reason()


# ---- the weight generator and packer, on CPU torch ----------------------------------------

@pytest.mark.parametrize("wdtype", ["int2", "int3", "uint4", "int5", "f6e3m2", "f3e1m1",
                                    "int8", "f8e4m3"])
def test_pack_rows_is_the_examples_pack_weights(wdtype, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(weights, "CHUNK_ELEMENTS", 100)  # several row blocks
    bits = dtypes.parse(wdtype).bits
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 1 << bits, size=(37, 48)).astype(np.uint8)
    got = weights.pack_rows(torch.from_numpy(codes), bits).numpy()
    assert np.array_equal(got, tilevm_adapter.example_module().pack_weights(codes, wdtype))
    with pytest.raises(ValueError, match="multiple of 8"):
        weights.pack_rows(torch.zeros((2, 12), dtype=torch.uint8), bits)


@pytest.mark.parametrize("wdtype, group_size", [("int4", 32), ("f8e4m3", 64),
                                                 ("f8e5m2", 32), ("uint3", 128)])
def test_make_weights_dequantizes_as_the_example(wdtype, group_size, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(weights, "CHUNK_ELEMENTS", 700)  # row blocks that straddle groups
    K, N = 4 * group_size, 40
    gen = torch.Generator().manual_seed(3)
    w = weights.make_weights(wdtype, group_size, N, K, gen, device="cpu")
    codes, scales = w.codes.numpy(), w.scales.numpy()
    assert (w.K, w.N) == (K, N) and scales.shape == (K // group_size, N)
    assert scales.dtype == np.float16 and (scales > 0).all()
    values = dtypes.decode(codes, wdtype)
    assert np.isfinite(values).all()  # no NaN or inf codes (f8e4m3, f8e5m2)
    assert len(np.unique(codes)) > 1
    example = tilevm_adapter.example_module()
    want = example.dequantize(example.pack_weights(codes, wdtype), scales, wdtype, group_size)
    assert np.array_equal(w.dequantized.numpy(), want)
    with pytest.raises(measure.Unsupported, match="multiple of group_size"):
        weights.make_weights(wdtype, group_size, N, K + 1, gen, device="cpu")


def test_tolerances_per_activation_and_backend():
    assert protocol.tolerance("tilevm", "f16") == 2.0 ** -7
    assert protocol.tolerance("cublas", "bf16") == 2.0 ** -4
    assert protocol.tolerance("gemlite", "f16") == 4 * 2.0 ** -7  # f16 atomics at M=1


def test_check_passes_rounding_and_fails_wrong_or_nan_results():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    x = torch.rand((5, 256), generator=gen) * 2 - 1
    w = torch.rand((256, 24), generator=gen, dtype=torch.float64) * 2 - 1
    ref = x.double() @ w
    tol = protocol.tolerance("tilevm", "f16")
    good = measure.check(ref.to(torch.float16), ref, tol)
    assert good["check_passed"] and good["max_rel_err"] < 2.0 ** -9
    assert good["tolerance"] == tol
    rms = float(ref.pow(2).mean().sqrt())
    bad = ref.clone()
    bad[2, 3] += 0.02 * rms  # one element off by 2% of the rms
    result = measure.check(bad.to(torch.float16), ref, tol)
    assert not result["check_passed"] and result["max_rel_err"] == pytest.approx(0.02, 0.1)
    gemlite_tol = protocol.tolerance("gemlite", "f16")
    assert measure.check(bad.to(torch.float16), ref, gemlite_tol)["check_passed"]
    poisoned = ref.to(torch.float16)
    poisoned[4, 0] = float("nan")  # an element the kernel never wrote
    result = measure.check(poisoned, ref, tol)
    assert not result["check_passed"] and not result["output_finite"]
    assert math.isinf(result["max_abs_err"])
    bf16_tol = protocol.tolerance("cublas", "bf16")
    assert measure.check(ref.to(torch.bfloat16), ref, bf16_tol)["check_passed"]


# ---- on a GPU ----------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_tiny_benchmark_runs_checks_and_times_on_the_gpu(tmp_path):
    cuda_torch()  # (the bench times cuBLAS through PyTorch)
    status = qmm.main([str(tmp_path), "--shapes", "256x512", "--m", "1,17",
                       "--dtypes", "int4,f6e3m2", "--act", "f16,bf16",
                       "--backends", "tilevm,cublas", "--budget-s", "0"])
    report = json.loads((tmp_path / "qmm.json").read_text())
    assert status == 0 and report["status"] == "ran"
    assert report["ceilings"]["copy_bw_bytes_per_s"] > 1e11
    graph = {(r["backend"], r["wdtype"], r["act"], r["M"]): r for r in report["results"]
             if r["method"] == "graph"}
    rows = {(r["backend"], r["wdtype"], r["act"], r["M"]): r for r in report["results"]
            if r["method"] == "isolated"}
    assert len(rows) == len(graph) == 2 * 2 + 2 * 2 * 2
    for r in rows.values():  # tilevm.kernels runs bf16 too
        assert r["status"] == "ok" and r["check_passed"] and r["reps"] >= 100
        assert r["timing"] in ("do_bench", "events") and r["host_us_per_launch"] > 0
        assert r["us"] > 0 and 0 < r["roofline_fraction"] < 1.5
    for r in graph.values():  # weight copies (up to 60), replayed from a graph
        assert r["status"] == "ok" and r["copies"] >= 2 and r["us"] > 0, r.get("reason")
        assert r["speedup_vs_cublas"] > 0
    assert rows[("tilevm", "int4", "f16", 1)]["speedup_vs_cublas_f16"] > 0
    tilevm_row = rows[("tilevm", "int4", "f16", 1)]
    assert tilevm_row["note"] == "tilevm.kernels"  # not the example fallback
    assert 0 < tilevm_row["compile"]["first_call_s"] < 60  # tuning, compiles included
    assert (tmp_path / "qmm.md").exists()
