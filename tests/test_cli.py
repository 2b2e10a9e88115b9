"""`vmc dtypes`, and the value tables in docs/dtypes.md against it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from kernel_harness import vmc

from tilevm import dtypes
from tilevm.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs" / "dtypes.md"


def run_vmc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tilevm.cli", *args],
                          capture_output=True, text=True, timeout=60)


def test_vmc_dtypes_lists_every_type(capsys):
    assert main(["dtypes"]) == 0
    out = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in out[1:]]
    assert names == [t.name for t in dtypes.all_dtypes()]
    row = dict(zip(out[0].split(), next(l for l in out if l.startswith("f6e3m2 ")).split()))
    assert (row["min"], row["max"], row["smallest>0"]) == ("-28.0", "28.0", "0.0625")


def test_vmc_dtypes_value_table_matches_codec(capsys):
    assert main(["dtypes", "f6e3m2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# f6e3m2"
    rows = [line.split() for line in lines[2:]]
    assert len(rows) == 64
    for code, (c, bits, value) in enumerate(rows):
        assert int(c) == code and int(bits, 2) == code
        assert float(value) == dtypes.decode(code, "f6e3m2")




def test_vmc_errors_go_to_stderr_with_status_2(capsys):
    status, out, err = vmc(capsys, "dtypes", "f6e3m3")
    assert status == 2 and out == ""
    assert "f6e3m3" in err and "Traceback" not in err
    status, _, err = vmc(capsys, "dtypes", "f16")
    assert status == 2 and "1..8 bits" in err
    status, _, err = vmc(capsys, "frobnicate")
    assert status == 2 and "invalid choice" in err


def test_vmc_help_and_version():
    """The process entry (`python -m tilevm.cli`); the other tests call `main`."""
    assert "dtypes" in run_vmc("--help").stdout
    assert run_vmc("--version").stdout.startswith("vmc (tilevm)")


def test_python_m_tilevm_is_vmc():
    """`python -m tilevm ARGS` runs `vmc ARGS`: same output, same exit status."""
    run = subprocess.run([sys.executable, "-m", "tilevm", "dtypes", "int3"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout == run_vmc("dtypes", "int3").stdout
    bad = subprocess.run([sys.executable, "-m", "tilevm", "dtypes", "int9"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "int9" in bad.stderr and "Traceback" not in bad.stderr


def doc_tables() -> dict[str, str]:
    text = DOCS.read_text()
    return dict(re.findall(r"^### (\S+)\n\n```\n(.*?)\n```", text, flags=re.S | re.M))


def test_docs_have_the_required_tables():
    assert {"f4e2m1", "f6e3m2"} <= set(doc_tables())


@pytest.mark.parametrize("name", sorted(doc_tables()))
def test_docs_value_table_matches_vmc(name, capsys):
    assert main(["dtypes", name]) == 0
    printed = capsys.readouterr().out.split("\n", 1)[1].rstrip("\n")
    assert doc_tables()[name] == printed


def test_docs_range_table_matches_vmc(capsys):
    assert main(["dtypes"]) == 0
    assert capsys.readouterr().out.strip() in DOCS.read_text()
