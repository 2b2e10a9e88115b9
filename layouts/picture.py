"""Pictures of register layouts: a text grid (for golden tests and terminals) and an SVG
(for docs and `vmc layout --svg`).

Both draw the tile as a grid (a 1-D tile is one row; higher ranks are refused, flatten
first) and list *every* owner of each cell, so replication is visible. In the SVG a
cell's hue is its first owner's warp and its lightness the lane, so a warp's footprint
reads as one colour; with `element_bits` each owner's bit slot in its registers is
shown too (`T3:R5 b15-17`: bits 15..17 of thread 3's register array).
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from tilevm.layouts.errors import LayoutError
from tilevm.layouts.register_layout import RegisterLayout

WARP_SIZE = 32


def _grid_shape(layout: RegisterLayout) -> tuple[int, int]:
    if layout.ndim == 1:
        return 1, layout.shape[0]
    if layout.ndim == 2:
        return layout.shape[0], layout.shape[1]
    raise LayoutError(f"pictures draw 1-D and 2-D layouts; this one has shape {layout.shape} "
                      f"(flatten or reshape it first)")


def _owner_labels(layout: RegisterLayout, element_bits: int | None) -> list[list[str]]:
    rows, cols = _grid_shape(layout)
    labels = []
    for r in range(rows):
        row = []
        for c in range(cols):
            coord = (c,) if layout.ndim == 1 else (r, c)
            parts = []
            for thread, local in layout.owners(coord):
                text = f"T{thread}:R{local}"
                if element_bits is not None:
                    lo = local * element_bits
                    text += f" b{lo}-{lo + element_bits - 1}" if element_bits > 1 else f" b{lo}"
                parts.append(text)
            row.append(",".join(parts))
        labels.append(row)
    return labels


def to_text(layout: RegisterLayout, element_bits: int | None = None) -> str:
    """A grid, one cell per tile element, each cell listing `T{thread}:R{local}` of
    every owner (comma separated when the element is replicated)."""
    labels = _owner_labels(layout, element_bits)
    width = max(len(cell) for row in labels for cell in row)
    return "\n".join(" ".join(cell.ljust(width) for cell in row).rstrip() for row in labels)


def to_svg(layout: RegisterLayout, element_bits: int | None = None,
           cell_width: int | None = None, cell_height: int = 22) -> str:
    """An SVG picture: cells coloured by warp (hue) and lane (lightness), each listing
    every owner, with row and column indices on the margins."""
    rows, cols = _grid_shape(layout)
    labels = _owner_labels(layout, element_bits)
    longest = max(len(cell) for row in labels for cell in row)
    cell_width = cell_width or max(48, 7 * longest + 8)
    margin = 28
    width, height = margin + cols * cell_width + 4, margin + rows * cell_height + 24
    warps = max(1, -(-layout.num_threads // WARP_SIZE))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace" font-size="11">',
        f"<title>{escape(str(layout))}</title>",
    ]
    for c in range(cols):
        x = margin + c * cell_width + cell_width / 2
        out.append(f'<text x="{x}" y="{margin - 8}" text-anchor="middle">{c}</text>')
    for r in range(rows):
        y = margin + r * cell_height + cell_height / 2 + 4
        out.append(f'<text x="{margin - 6}" y="{y}" text-anchor="end">{r}</text>')
        for c in range(cols):
            coord = (c,) if layout.ndim == 1 else (r, c)
            thread, _ = layout.owners(coord)[0]
            hue = (360 * (thread // WARP_SIZE)) // warps
            light = 92 - 40 * (thread % WARP_SIZE) // WARP_SIZE
            x, y0 = margin + c * cell_width, margin + r * cell_height
            out.append(f'<rect x="{x}" y="{y0}" width="{cell_width}" height="{cell_height}" '
                       f'fill="hsl({hue},70%,{light}%)" stroke="#444" stroke-width="0.5"/>')
            out.append(f'<text x="{x + 3}" y="{y0 + cell_height / 2 + 4}">'
                       f"{escape(labels[r][c])}</text>")
    legend = (f"{layout.num_threads} threads ({warps} warp{'s' if warps > 1 else ''}), "
              f"{layout.local_size} registers per thread")
    out.append(f'<text x="{margin}" y="{height - 8}">{escape(legend)}</text>')
    out.append("</svg>")
    return "\n".join(out)
