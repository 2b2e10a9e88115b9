"""Layout pictures (text and SVG), the layout text syntax, and `vmc layout`."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kernel_harness import ROOT

from tilevm.cli import main
from tilevm.layouts import (
    LayoutError,
    RegisterLayout,
    column_spatial,
    local,
    mma_m16n8k16_c,
    parse_layout,
    picture,
    replicated,
    spatial,
    swizzled,
)


def test_golden_text_spatial_then_local():
    assert picture.to_text(spatial(2, 2).local(1, 2)) == "\n".join([
        "T0:R0 T0:R1 T1:R0 T1:R1",
        "T2:R0 T2:R1 T3:R0 T3:R1",
    ])


def test_golden_text_column_spatial():
    assert picture.to_text(column_spatial(2, 3)) == "\n".join([
        "T0:R0 T2:R0 T4:R0",
        "T1:R0 T3:R0 T5:R0",
    ])


def test_golden_text_replicated_lists_every_owner():
    assert picture.to_text(replicated(2, ndim=1).spatial(2)) == "T0:R0,T2:R0 T1:R0,T3:R0"


def test_golden_text_mma_c_fragment_first_rows():
    rows = picture.to_text(mma_m16n8k16_c()).splitlines()
    # PTX ISA: c0,c1 at (groupID, 2*threadID_in_group + {0,1}); c2,c3 eight rows down.
    assert rows[0].split() == ["T0:R0", "T0:R1", "T1:R0", "T1:R1", "T2:R0", "T2:R1", "T3:R0",
                               "T3:R1"]
    assert rows[8].split()[:2] == ["T0:R2", "T0:R3"]


def test_golden_text_bit_slots():
    assert picture.to_text(local(1, 3), element_bits=3) == "T0:R0 b0-2 T0:R1 b3-5 T0:R2 b6-8"


def test_pictures_refuse_rank_3():
    with pytest.raises(LayoutError, match="1-D and 2-D"):
        picture.to_text(local(2, 2, 2))


small = st.integers(1, 4)
layouts_2d = st.builds(
    lambda a, b, c, d, r: spatial(a, b).local(c, d) * (replicated(r, ndim=2) if r > 1
                                                        else local(1, 1)),
    small, small, small, small, st.integers(1, 3))


@given(layouts_2d)
def test_svg_is_well_formed_and_lists_every_owner(layout):
    svg = picture.to_svg(layout)
    root = ET.fromstring(svg)
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    listed = {owner for text in texts for owner in text.split(",") if owner.startswith("T")}
    every = {f"T{t}:R{l}" for t in range(layout.num_threads) for l in range(layout.local_size)}
    assert listed == every


@given(layouts_2d)
def test_text_lists_every_owner_once_per_element(layout):
    cells = picture.to_text(layout).split()
    owners = [o for cell in cells for o in cell.split(",")]
    assert len(owners) == layout.num_threads * layout.local_size
    assert len(cells) == layout.shape[0] * layout.shape[1]


@given(layouts_2d)
def test_layout_text_reads_back(layout):
    assert parse_layout(str(layout)) == layout


def test_shared_layout_text_reads_back():
    layout = swizzled((8, 64), "f16")
    assert parse_layout(str(layout)) == layout


@pytest.mark.parametrize("text, message", [
    ("foo(3)", "unknown constructor"),
    ("__import__('os').system('true')", "not a layout constructor"),
    ("local(2).bogus()", "not a layout constructor or method"),
    ("local(2, 1) * spatial(8)", "one rank"),
    ("local(-1)", "local"),
    ("local(2", "cannot read layout"),
    ("lambda: 0", "not allowed"),
])
def test_layout_text_errors(text, message):
    with pytest.raises(LayoutError, match=message):
        parse_layout(text)


def test_vmc_layout_register(capsys, tmp_path):
    out = tmp_path / "l.svg"
    assert main(["layout", "spatial(2,2).local(1,2)", "--svg", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "4 threads, 2 registers per thread" in printed
    assert picture.to_text(spatial(2, 2).local(1, 2)) in printed
    ET.parse(out)


def test_vmc_layout_shared_banks(capsys):
    assert main(["layout", "swizzled((8, 64), f16)"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    # The first 16-byte chunk (8 f16 values) of each of the 8 rows is in a distinct bank group.
    groups = {int(line.split()[0]) // 4 for line in lines}
    assert len(groups) == 8


def test_vmc_layout_error(capsys):
    assert main(["layout", "local(2"]) == 2
    assert "cannot read layout" in capsys.readouterr().err


DOCS = ROOT / "docs" / "layouts.md"
_BLOCK = re.compile(r'```text\n\$ vmc layout "([^"]+)"([^\n]*)\n(.*?)\n```', re.S)


def doc_pictures() -> list[tuple[str, str, str]]:
    return _BLOCK.findall(DOCS.read_text())


def test_docs_have_pictures():
    assert len(doc_pictures()) >= 10


@pytest.mark.parametrize("expr, options, body", doc_pictures(), ids=lambda v: str(v)[:40])
def test_docs_pictures_match_vmc_layout(expr, options, body):
    layout = parse_layout(expr)
    if isinstance(layout, RegisterLayout):
        bits = re.search(r"--bits (\d+)", options)
        assert body == picture.to_text(layout, int(bits.group(1)) if bits else None)
        return
    show = re.search(r"--show (\w+)", options).group(1)
    columns = int(re.search(r"first (\d+) columns", options).group(1))
    rows = layout.to_text(show=show).splitlines()
    for doc_row, row in zip(body.splitlines(), rows):
        if doc_row.strip() != "...":
            assert doc_row.split() == row.split()[:columns]
