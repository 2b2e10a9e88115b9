"""The napkin diagram of a program (after "FlashAttention on a Napkin"), as SVG 1.1:

    svg = napkin_svg(program, analyze_traffic(program, sizes), analyze_liveness(program, sizes))

- Every tensor is a horizontal wire over the steps it is live (`cost.liveness`: the
  instructions in program order, loops flattened), coloured by its memory level
  (`PALETTE`), labelled with its name, dtype and shape. Wires are grouped by level:
  global, then shared, then register.
- Every instruction is a column. A transfer is an instruction that reads a tensor of
  one level into, or writes it onto, a tensor of another: it is drawn from the one wire
  to the other, changing colour half way, and labelled with the bytes the launch moves
  that way (from `cost.traffic`): for a global tensor, its pointer's bytes read or
  written; between shared memory and registers, the level's total. Where several
  transfers share one such count, each is labelled with it and "in n" (the n transfers
  together). Other instructions join the wires they touch with a thin grey line.
- Loops are boxes around their steps: "s" for a streamed loop (one that moves a new
  global tile every iteration: a read from global memory at offsets that depend on the
  loop), else the loop's variable alone, with the trip count (at block 0 where the
  bounds read the block index). The outer box "g" is the grid's partition: one block's
  program, run by every block of the grid.
- Below, a table: one column per step, one row per level, the bytes live in the block
  at that step; each row's peak is bold.

The text is deterministic: program order, fixed integer coordinates, fixed number
formats, no time stamps.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import prod
from xml.sax.saxutils import escape, quoteattr

from tilevm.cost.liveness import LEVELS, Liveness, LoopSpan, Step, TensorLife
from tilevm.cost.traffic import Traffic
from tilevm.ir.expr import Expr, format_expr, free_vars
from tilevm.ir.instructions import AtomicAdd, GlobalView, Instruction
from tilevm.ir.stmt import AssignVar, For, Let, Program
from tilevm.ir.transform import instructions, nested_statements
from tilevm.ir.types import MemorySpace, Tensor

__all__ = ["PALETTE", "format_bytes", "napkin_svg", "step_transfers"]

PALETTE = {"global": "#4c72b0", "shared": "#dd8452", "register": "#55a868"}
GREY = "#8c8c8c"
COLUMN = 84  # px per step
ROW = 22  # px per wire
LINE = 16  # px per text line (titles, loop labels, table rows)
HEADER = 130  # px for the step labels, written at 45 degrees


def format_bytes(n: int) -> str:
    """Bytes in binary units with three significant digits: 512 B, 4.00 KiB, 24.0 MiB."""
    if n < 1024:
        return f"{n} B"
    value, power = float(n) / 1024, 0
    while value >= 1024 and power < 3:
        value, power = value / 1024, power + 1
    unit = ("KiB", "MiB", "GiB", "TiB")[power]
    digits = 2 if value < 10 else 1 if value < 100 else 0
    return f"{value:.{digits}f} {unit}"


def step_transfers(inst: Instruction) -> list[tuple[Tensor | None, Tensor]]:
    """The (source, destination) pairs of an instruction that cross memory levels: its
    destination (the tensor it defines, else the one it writes) from each tensor it reads
    in another level; an `atomic_add` adds a register value (no tensor: None)."""
    destination = inst.output or getattr(inst, "dst", None)
    if not isinstance(destination, Tensor):
        return []
    if isinstance(inst, AtomicAdd):
        return [(None, destination)]
    return [(source, destination) for source in inst.input_tensors()
            if source is not destination and source.space is not destination.space]


def napkin_svg(program: Program, traffic: Traffic, liveness: Liveness) -> str:
    """The napkin diagram (module docstring) of `program`, with the bytes of one launch
    (`traffic`) and its live bytes (`liveness`, of the same program)."""
    if not isinstance(program, Program):
        raise TypeError(f"napkin_svg takes a specialized Program, got {type(program).__name__}")
    if not isinstance(traffic, Traffic) or not isinstance(liveness, Liveness):
        raise TypeError("napkin_svg takes the program's Traffic (cost.traffic) and its "
                        "Liveness (cost.liveness)")
    steps = instructions(program.body)
    if len(steps) != len(liveness.steps) or any(
            a is not s.instruction for a, s in zip(steps, liveness.steps)):
        raise ValueError(f"the liveness given is not that of kernel {program.name} "
                         "(analyze_liveness(program, ...) of the same program object)")
    return _Drawing(program, traffic, liveness).svg()


class _Drawing:
    """The geometry and the elements, built top to bottom."""

    def __init__(self, program: Program, traffic: Traffic, liveness: Liveness) -> None:
        self.program, self.traffic, self.liveness = program, traffic, liveness
        order = {level: i for i, level in enumerate(LEVELS)}
        self.wires = sorted(liveness.tensors.values(),
                            key=lambda t: (order[t.level], t.start, t.name))
        self.types = _tensor_types(program)
        self.labels = {t.name: self._wire_label(t) for t in self.wires}
        self.left = 16 + 7 * max((len(s) for s in self.labels.values()), default=8)
        self.left = max(self.left, 140)
        depth = max((loop.depth + 1 for loop in liveness.loops), default=0)
        self.boxes_top = 3 * LINE + 8 + HEADER  # title, legend, totals, the step labels
        self.wires_top = self.boxes_top + (depth + 1) * LINE + 8
        self.row = {t.name: self.wires_top + ROW // 2 + i * ROW for i, t in enumerate(self.wires)}
        self.wires_bottom = self.wires_top + len(self.wires) * ROW
        self.table_top = self.wires_bottom + (depth + 1) * 4 + 2 * LINE
        self.moved = "moved over the launch: " + ", ".join(
            f"{kind} {format_bytes(n)}" for kind, n in traffic.total.items() if kind != "dram")
        # room for the last step's slanted label, and for the line of totals
        self.width = max(self.left + COLUMN * max(len(liveness.steps), 1) + HEADER,
                         16 + 7 * len(self.moved))
        self.height = self.table_top + (len(LEVELS) + 2) * LINE + 16
        self.pointer = {s.instruction.out.name: s.instruction.ptr.name for s in liveness.steps
                        if isinstance(s.instruction, GlobalView)}
        self.counts = self._transfer_counts()
        self.out: list[str] = []

    # ---- geometry and text ---------------------------------------------------------------

    def x(self, step: int) -> int:
        return self.left + COLUMN * step + COLUMN // 2

    def text(self, x: int, y: int, content: str, **attrs: str | int) -> None:
        extra = "".join(f" {k.replace('_', '-')}={quoteattr(str(v))}"
                        for k, v in attrs.items())
        self.out.append(f'<text x="{x}" y="{y}"{extra}>{escape(content)}</text>')

    def line(self, x1: int, y1: int, x2: int, y2: int, colour: str, width: int) -> None:
        self.out.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{colour}" '
                        f'stroke-width="{width}"/>')

    def _wire_label(self, life: TensorLife) -> str:
        tensor = self.types[life.name]
        dims = ", ".join(str(d) if isinstance(d, int) else _short(d) for d in tensor.type.shape)
        return f"%{life.name} {tensor.dtype}[{dims}]"

    # ---- the parts -------------------------------------------------------------------------

    def svg(self) -> str:
        self.out.append(f'<rect x="0" y="0" width="{self.width}" height="{self.height}" '
                        'fill="#ffffff"/>')
        self._title()
        self._boxes()
        self._wires()
        for step in self.liveness.steps:
            self._step(step)
        self._table()
        head = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{self.width}" '
                f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" '
                'font-family="monospace" font-size="11">')
        return "\n".join([head, *self.out, "</svg>"]) + "\n"

    def _title(self) -> None:
        note = " (counts approximate)" if self.traffic.approximate else ""
        self.text(8, LINE, f"{self.program.name}: one block's program, bytes over a launch "
                           f"of {_blocks(self.traffic)}{note}", font_weight="bold")
        x = 8
        for level in LEVELS:
            self.out.append(f'<rect x="{x}" y="{LINE + 8}" width="14" height="10" '
                            f'fill="{PALETTE[level]}"/>')
            self.text(x + 18, 2 * LINE + 2, level)
            x += 18 + 8 * (len(level) + 1)
        self.text(8, 3 * LINE + 4, self.moved)
        for step in self.liveness.steps:
            x0, y0 = self.x(step.index) - 4, self.boxes_top - 4
            self.text(x0, y0, f"{step.index} {step.label}",
                      transform=f"rotate(-45 {x0} {y0})", fill="#333333")

    def _boxes(self) -> None:
        grid = "×".join(map(str, self._grid_dims())) + f" = {_blocks(self.traffic)}"
        depth = max((loop.depth + 1 for loop in self.liveness.loops), default=0)
        self._box(self.left + 2, self.left + COLUMN * len(self.liveness.steps) - 2,
                  self.boxes_top, depth + 1, f"g: grid {grid}", "#666666")
        for loop in self.liveness.loops:
            if loop.last < loop.first:
                continue
            label = f"{'s ' if _streamed(loop.loop) else ''}{loop.loop.var.name} ×{_trips(loop)}"
            inset = 6 + 4 * loop.depth  # a nested loop's box inside its parent's
            self._box(self.x(loop.first) - COLUMN // 2 + inset,
                      self.x(loop.last) + COLUMN // 2 - inset,
                      self.boxes_top + (loop.depth + 1) * LINE, depth - loop.depth, label,
                      "#999999")

    def _box(self, x1: int, x2: int, top: int, inset: int, label: str, colour: str) -> None:
        bottom = self.wires_bottom + 4 * inset
        self.out.append(f'<rect x="{x1}" y="{top}" width="{x2 - x1}" height="{bottom - top}" '
                        f'fill="none" stroke="{colour}" stroke-width="1"/>')
        self.text(x1 + 4, top + LINE - 4, label, fill=colour)

    def _grid_dims(self) -> tuple[int, ...]:
        dims = list(self.traffic.grid)
        while len(dims) > 1 and dims[-1] == 1:
            dims.pop()
        return tuple(dims)

    def _wires(self) -> None:
        for life in self.wires:
            y = self.row[life.name]
            self.text(8, y + 4, self.labels[life.name], fill=PALETTE[life.level])
            x1, x2 = self.x(life.start), self.x(life.end)
            if x1 == x2:
                x1, x2 = x1 - 8, x2 + 8
            self.out.append(f'<g><title>{escape(self._wire_title(life))}</title>')
            self.line(x1, y, x2, y, PALETTE[life.level], 4)
            self.out.append("</g>")

    def _wire_title(self, life: TensorLife) -> str:
        shares = f", in the memory of %{life.storage}" if life.storage != life.name else ""
        return (f"%{life.name}: {life.level}, {life.bytes} bytes per block, live at steps "
                f"{life.start}..{life.end}{shares}")

    def _step(self, step: Step) -> None:
        inst, x = step.instruction, self.x(step.index)
        touched = sorted({self.row[t.name] for t in (*inst.input_tensors(), inst.output)
                          if t is not None and t.name in self.row})
        if len(touched) > 1:
            self.line(x, touched[0], x, touched[-1], GREY, 1)
        for y in touched:
            self.out.append(f'<circle cx="{x}" cy="{y}" r="3" fill="{GREY}"/>')
        for source, destination in step_transfers(inst):
            self._transfer(x, source, destination)

    def _transfer(self, x: int, source: Tensor | None, destination: Tensor) -> None:
        y2 = self.row[destination.name]
        y1 = self.row[source.name] if source is not None else y2 + ROW
        level1 = source.space.value if source is not None else "register"
        kind = f"{level1}->{destination.space.value}"
        key = self._key(kind, source, destination)
        moved = self._bytes(kind, key)
        # the colour changes on the boundary between two wires nearest the middle, where
        # the label crosses no wire
        middle = self.wires_top + round(((y1 + y2) / 2 - self.wires_top) / ROW) * ROW
        together = self.counts[key]
        label = format_bytes(moved) + (f" in {together}" if together > 1 else "")
        title = f"{kind}: {moved} bytes over the launch"
        if together > 1:
            title += f", the {together} transfers counted together"
        self.out.append(f"<g><title>{escape(title)}</title>")
        self.line(x, y1, x, middle, PALETTE[level1], 3)
        self.line(x, middle, x, y2, PALETTE[destination.space.value], 3)
        self.out.append(f'<circle cx="{x}" cy="{y2}" r="4" '
                        f'fill="{PALETTE[destination.space.value]}"/>')
        self.text(x + 5, middle + 4, label, font_size=10)
        self.out.append("</g>")

    def _key(self, kind: str, source: Tensor | None, destination: Tensor) -> tuple[str, str]:
        """What the traffic counts a transfer in: its global tensor's pointer and
        direction, or the level between shared memory and registers."""
        if source is not None and source.name in self.pointer:
            return self.pointer[source.name], "read"
        if destination.name in self.pointer:
            return self.pointer[destination.name], "write"
        return kind, ""

    def _bytes(self, kind: str, key: tuple[str, str]) -> int:
        name, direction = key
        if not direction:
            return self.traffic.total.get(kind, 0)
        tensor = self.traffic.tensors.get(name)
        if tensor is None:
            return 0
        return tensor.read if direction == "read" else tensor.written

    def _transfer_counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for step in self.liveness.steps:
            for source, destination in step_transfers(step.instruction):
                level = source.space.value if source is not None else "register"
                key = self._key(f"{level}->{destination.space.value}", source, destination)
                counts[key] = counts.get(key, 0) + 1
        return counts

    def _table(self) -> None:
        top = self.table_top
        self.text(8, top, "live bytes per block", font_weight="bold")
        for row, level in enumerate(LEVELS):
            y = top + (row + 1) * LINE
            self.line(self.left, y + 4, self.left + COLUMN * len(self.liveness.steps), y + 4,
                      "#dddddd", 1)
            self.text(8, y, level, fill=PALETTE[level])
            peak = self.liveness.peak[level]
            for step in self.liveness.steps:
                live = step.live[level]
                bold = {"font_weight": "bold"} if live == peak and peak else {}
                self.text(self.x(step.index), y, format_bytes(live), text_anchor="middle",
                          font_size=10, **bold)
        live = self.liveness
        self.text(8, top + (len(LEVELS) + 1) * LINE + 4,
                  "peaks: " + ", ".join(f"{level} {format_bytes(live.peak[level])}"
                                        for level in LEVELS)
                  + f"; registers {live.register_bytes_per_thread} bytes per thread "
                    f"({live.threads} threads), {live.registers_per_thread} 32-bit registers")


def _blocks(traffic: Traffic) -> str:
    n = prod(traffic.grid)
    return f"{n} block{'s' if n != 1 else ''}"


def _short(e: Expr) -> str:
    """An expression without the outer parentheses of the text form."""
    text = format_expr(e)
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text


def _trips(loop: LoopSpan) -> str:
    if loop.trips is None:
        return "?"
    return f"{loop.trips} at block 0" if loop.block_dependent else str(loop.trips)


def _tensor_types(program: Program) -> dict[str, Tensor]:
    """Every tensor an instruction defines or reads, by name."""
    found: dict[str, Tensor] = {}
    for inst in instructions(program.body):
        for t in (inst.output, *inst.input_tensors()):
            if t is not None:
                found.setdefault(t.name, t)
    return found


def _streamed(loop: For) -> bool:
    """Whether the loop reads a new global tile every iteration: a read from global
    memory inside it at offsets that read its variable or one bound inside it."""
    inside = {loop.var} | {s.var for s in nested_statements(loop.body)
                           if isinstance(s, (For, Let, AssignVar))}
    for s in nested_statements(loop.body):
        if isinstance(s, Instruction) and any(
                source is not None and source.space is MemorySpace.GLOBAL
                for source, _ in step_transfers(s)):
            offsets: Iterable[Expr] = getattr(s, "offsets", ())
            if any(free_vars(o) & inside for o in offsets if isinstance(o, Expr)):
                return True
    return False



