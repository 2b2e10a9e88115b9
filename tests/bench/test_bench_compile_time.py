"""`bench/compile_time.py`: every configuration names a kernel that specializes, the
library's are the tuner's schedules for their widths, and one timed cold compile splits
into its four stages."""

from __future__ import annotations

import json

from tilevm import dtypes
from tilevm.bench import compile_time
from tilevm.kernels.tilings import HALF_ATOM_BITS


def test_every_configuration_specializes_with_a_fresh_kernel():
    found = compile_time.configs()
    names = [name for name, _, _ in found]
    assert len(names) == len(set(names)) == len(compile_time.EXAMPLES) + 3 * len(
        compile_time.LIBRARY_TYPES)
    for name, make_kernel, constants in found:
        first, second = make_kernel(), make_kernel()
        assert first is not second, name  # no specialization cached from an earlier run
        if name.startswith("qmm") and name.endswith("M=4096"):
            bits = dtypes.parse(constants["wdtype"]).bits
            assert constants.get("half_atoms", False) == (bits in HALF_ATOM_BITS), name


def test_a_run_reports_each_stage(tmp_path, capsys):
    assert compile_time.main([str(tmp_path), "--repeats", "1", "--only", "vector_add"]) == 0
    (result,) = json.loads((tmp_path / "compile_time.json").read_text())["results"]
    assert result["name"] == "vector_add 1024" and result["arch"] == "sm_90a"
    assert set(result["seconds"]) == {"frontend", "passes", "codegen", "llvm"}
    assert result["total_seconds"] == sum(result["seconds"].values()) > 0
    assert "vector_add 1024" in capsys.readouterr().out
