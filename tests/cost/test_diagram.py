"""The napkin diagram (cost/diagram.py): the matmul example against a golden file, and
checks that do not depend on it: valid XML, one wire per tensor coloured by its level,
transfer labels equal to the bytes worked out by hand, loop labels, determinism, and
`vmc analyze --svg`.

Regenerate the golden file after an intended change (and look at it):
    TILEVM_UPDATE_GOLDEN=1 pytest -q tests/cost/test_diagram.py
"""

from __future__ import annotations

import importlib
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from kernel_harness import ROOT, vmc

from tilevm.cost.diagram import PALETTE, format_bytes, napkin_svg
from tilevm.cost.liveness import analyze_liveness
from tilevm.cost.traffic import analyze_traffic
from tilevm.ir.transform import instructions
from tilevm.vm import lang as tv

matmul = importlib.import_module("tilevm.examples.matmul").matmul
GOLDEN = Path(__file__).resolve().parent / "golden" / "matmul.svg"
SIZES = {"M": 256, "N": 256, "K": 256}
TILES = {"bm": 64, "bn": 64, "bk": 32}
SVG = "{http://www.w3.org/2000/svg}"


@tv.kernel(num_warps=1)
def through_shared(x: tv.ptr(tv.f16, const=True), y: tv.ptr(tv.f16), n: tv.int32):
    tv.grid(1)
    gx = tv.global_view(x, [n, 32])
    gy = tv.global_view(y, [n, 32])
    s = tv.alloc_shared(tv.f16, [32, 32])
    for i in tv.range(0, n, 32):  # streamed: a new tile of x every iteration
        tv.copy_async(s, gx, [i, 0])
        tv.copy_async_commit()
        tv.copy_async_wait(0)
        tv.sync()
        top = tv.load_shared(s, [0, 0], [16, 32])
        bottom = tv.load_shared(s, [16, 0], [16, 32])
        tv.sync()
        tv.store_global(gy, top, [i, 0])
        tv.store_global(gy, bottom, [i + 16, 0])
    for _ in tv.range(0, 3):  # not streamed: it reads nothing from global memory
        tv.store_shared(s, tv.zeros([32, 32], tv.f16), [0, 0])


def diagram(kernel, sizes, **constants) -> str:
    program = kernel.specialize(**constants)
    return napkin_svg(program, analyze_traffic(program, sizes),
                      analyze_liveness(program, sizes))


def groups(svg: str) -> list[tuple[str, ET.Element]]:
    """Every titled group: its title and itself."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("version") == "1.1"
    return [(g.find(f"{SVG}title").text, g) for g in root.iter(f"{SVG}g")]


def transfers(svg: str) -> list[tuple[str, int, str]]:
    """(kind, bytes in the title, the visible label) of every transfer, in order."""
    found = []
    for title, g in groups(svg):
        match = re.match(r"(\w+->\w+): (\d+) bytes over the launch", title)
        if match:
            found.append((match[1], int(match[2]), g.find(f"{SVG}text").text))
    return found


def test_matmul_example_equals_the_golden_file():
    svg = diagram(matmul, SIZES, **TILES)
    if os.environ.get("TILEVM_UPDATE_GOLDEN"):
        GOLDEN.write_text(svg)
    assert svg == GOLDEN.read_text()


def test_one_wire_per_tensor_coloured_by_its_level():
    program = matmul.specialize(**TILES)
    svg = diagram(matmul, SIZES, **TILES)
    tensors = {t.name: t for i in instructions(program.body)
               for t in (i.output, *i.input_tensors()) if t is not None}
    wires = {}
    for title, g in groups(svg):
        match = re.match(r"%(\S+): (\w+),", title)
        if match:
            (line,) = g.findall(f"{SVG}line")
            wires[match[1]] = (match[2], line.get("stroke"))
    assert sorted(wires) == sorted(tensors)
    for name, (level, colour) in wires.items():
        assert level == tensors[name].type.space.value
        assert colour == PALETTE[level]
    labels = {t.text for t in ET.fromstring(svg).iter(f"{SVG}text")}
    assert {"%ga f16[M, K]", "%ta f16[64, 32]", "%acc f32[64, 64]"} <= labels


def test_matmul_transfers_are_labelled_with_the_closed_form():
    M, N, K = SIZES["M"], SIZES["N"], SIZES["K"]
    a = 2 * M * K * (N // TILES["bn"])  # A read once per column of blocks
    b = 2 * K * N * (M // TILES["bm"])  # B once per row of blocks
    c = 2 * M * N
    assert transfers(diagram(matmul, SIZES, **TILES)) == [
        ("global->register", a, format_bytes(a)), ("global->register", b, format_bytes(b)),
        ("register->global", c, format_bytes(c))]
    assert (format_bytes(a), format_bytes(c)) == ("512 KiB", "128 KiB")


def test_shared_transfers_and_loop_labels():
    n = 96
    svg = diagram(through_shared, {"n": n})
    rows = 2 * n * 32  # bytes of x, of y, and of the tiles moved through s
    assert transfers(svg) == [
        ("global->shared", rows, "6.00 KiB"),
        ("shared->register", rows, "6.00 KiB in 2"), ("shared->register", rows, "6.00 KiB in 2"),
        ("register->global", rows, "6.00 KiB in 2"), ("register->global", rows, "6.00 KiB in 2"),
        ("register->shared", 3 * 32 * 32 * 2, "6.00 KiB")]
    labels = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert "s i ×3" in labels and "_ ×3" in labels  # the loop over _ streams nothing
    assert "g: grid 1 = 1 block" in labels


def test_deterministic():
    first = diagram(matmul, SIZES, **TILES)
    assert diagram(matmul, SIZES, **TILES) == first
    assert diagram(through_shared, {"n": 64}) == diagram(through_shared, {"n": 64})


def test_format_bytes():
    assert [format_bytes(n) for n in (0, 1000, 1024, 24 * 1024, 1536 * 1024, 3 << 30)] == \
        ["0 B", "1000 B", "1.00 KiB", "24.0 KiB", "1.50 MiB", "3.00 GiB"]


def test_errors():
    program = matmul.specialize(**TILES)
    other = matmul.specialize(bm=32, bn=32, bk=32)
    traffic = analyze_traffic(program, SIZES)
    with pytest.raises(ValueError, match="liveness"):
        napkin_svg(program, traffic, analyze_liveness(other, SIZES))
    with pytest.raises(TypeError, match="Traffic"):
        napkin_svg(program, {}, analyze_liveness(program, SIZES))


def test_vmc_analyze_writes_the_diagram(capsys, tmp_path):
    out = tmp_path / "matmul.svg"
    args = [f"--set={k}={v}" for k, v in TILES.items()] + \
        [f"--arg={k}={v}" for k, v in SIZES.items()]
    status, text, err = vmc(capsys, "analyze", str(ROOT / "examples" / "matmul.py"), *args,
                            "--registers", "64", "--svg", str(out))
    assert status == 0, err
    assert "global->register" in text  # the table is still printed
    assert out.read_text() == GOLDEN.read_text()
