"""The scheduling control bits of the SASS in a cubin, read and edited in place (level 3
of the search, sm_90).

    cubin = Cubin(assemble(ptx, "sm_90a"))
    code = cubin.kernel("qmm")                 # the kernel's .text section
    code.control(7)                            # Control(stall=4, yield_=True, ...)
    edited = cubin.with_controls("qmm", {7: code.control(7).with_stall(6)})

Hopper's SASS cannot be reassembled with public tools, but each 128-bit instruction of
Volta and later carries its scheduling control in fixed bits above the opcode and
operands (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
Microbenchmarking", 2018), which can be rewritten in place without touching the rest:

| bits    | field        | meaning                                                      |
|---------|--------------|--------------------------------------------------------------|
| 105-108 | stall        | cycles the scheduler waits before issuing the next instruction |
| 109     | yield        | a hint to the scheduler about switching warps after it       |
| 110-112 | write barrier| the scoreboard a variable-latency result signals (7: none)   |
| 113-115 | read barrier | the scoreboard released when its operands are read (7: none) |
| 116-121 | wait mask    | the scoreboards to wait for before issuing                   |
| 122-125 | reuse        | operand slots kept in the reuse cache for the next instruction |

Which edits cannot change results (`SAFE`): a stall raised (only later issue; a stall
lowered lets a fixed-latency result be read before it is written), the yield hint
flipped (a scheduling hint), a reuse bit cleared (the operand is read from the register
file again). The scoreboard fields carry correctness and are never edited. Any other
edit goes through the bit-exact gate like a reordering.

Not every value of these bits is an instruction: on sm_90 nvdisasm refuses, for
example, a stall of 0 or above 11 with the yield bit set. So an edited cubin is kept
only if `disassemble` (nvdisasm, found as `backend.ptxas.find_cuda_tool` finds it)
decodes it to the same instructions, `.reuse` flags aside (`same_instructions`).

The ELF is read only as far as needed: the section headers and their names. A kernel
`k`'s code is the section `.text.k`; its size is a whole number of instructions.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace

from tilevm.backend.ptxas import DisassemblyError
from tilevm.backend.ptxas import disassemble as sass_text

__all__ = ["Control", "Cubin", "KernelCode", "CubinError", "INSTRUCTION_BYTES",
           "disassemble", "same_instructions"]

INSTRUCTION_BYTES = 16
_FIELDS = {  # name: (first bit, width), in the 128-bit little-endian instruction word
    "stall": (105, 4), "yield_": (109, 1), "write_barrier": (110, 3),
    "read_barrier": (113, 3), "wait_mask": (116, 6), "reuse": (122, 4),
}
MAX_STALL = 15


class CubinError(ValueError):
    """The bytes are not a cubin this module can read, or name no such kernel."""


@dataclass(frozen=True)
class Control:
    """One instruction's control bits (module docstring)."""

    stall: int
    yield_: int
    write_barrier: int
    read_barrier: int
    wait_mask: int
    reuse: int

    @classmethod
    def of_word(cls, word: int) -> Control:
        return cls(**{name: (word >> first) & ((1 << width) - 1)
                      for name, (first, width) in _FIELDS.items()})

    def into_word(self, word: int) -> int:
        """`word` with its control bits replaced by these."""
        for name, (first, width) in _FIELDS.items():
            mask = ((1 << width) - 1) << first
            word = (word & ~mask) | ((getattr(self, name) << first) & mask)
        return word

    def with_stall(self, stall: int) -> Control:
        if not 0 <= stall <= MAX_STALL:
            raise ValueError(f"a stall is 0..{MAX_STALL} cycles, got {stall}")
        return replace(self, stall=stall)

    def is_safe_from(self, original: Control) -> bool:
        """Whether these bits are a safe edit of `original` (module docstring): the
        scoreboards as they were, the stall not lower, no reuse bit added."""
        return (self.write_barrier, self.read_barrier, self.wait_mask) == \
            (original.write_barrier, original.read_barrier, original.wait_mask) and \
            self.stall >= original.stall and self.reuse & ~original.reuse == 0


@dataclass(frozen=True)
class KernelCode:
    """A kernel's code section: its name, where it lies in the cubin, and its words."""

    name: str
    offset: int
    words: tuple[int, ...]

    def control(self, i: int) -> Control:
        return Control.of_word(self.words[i])

    def controls(self) -> tuple[Control, ...]:
        return tuple(Control.of_word(w) for w in self.words)


class Cubin:
    """A cubin's bytes and its kernels' code sections (immutable: edits make a new one)."""

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.sections = _sections(self.data)

    def kernel_names(self) -> list[str]:
        return [name[len(".text."):] for name in self.sections if name.startswith(".text.")]

    def kernel(self, name: str) -> KernelCode:
        section = self.sections.get(f".text.{name}")
        if section is None:
            raise CubinError(f"the cubin has no kernel {name!r} (it has "
                             f"{', '.join(self.kernel_names()) or 'none'})")
        offset, size = section
        if size % INSTRUCTION_BYTES:
            raise CubinError(f"kernel {name!r}: its code is {size} bytes, not a whole "
                             f"number of {INSTRUCTION_BYTES}-byte instructions")
        raw = self.data[offset:offset + size]
        words = tuple(int.from_bytes(raw[i:i + INSTRUCTION_BYTES], "little")
                      for i in range(0, size, INSTRUCTION_BYTES))
        return KernelCode(name, offset, words)

    def with_controls(self, name: str, controls: dict[int, Control]) -> Cubin:
        """A copy with kernel `name`'s instructions `i` given `controls[i]`."""
        code = self.kernel(name)
        data = bytearray(self.data)
        for i, control in controls.items():
            if not 0 <= i < len(code.words):
                raise IndexError(f"kernel {name!r} has {len(code.words)} instructions, "
                                 f"no instruction {i}")
            start = code.offset + i * INSTRUCTION_BYTES
            data[start:start + INSTRUCTION_BYTES] = \
                control.into_word(code.words[i]).to_bytes(INSTRUCTION_BYTES, "little")
        return Cubin(bytes(data))


def _sections(data: bytes) -> dict[str, tuple[int, int]]:
    """Section name -> (file offset, size) of a little-endian ELF64 file."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise CubinError("not an ELF file (a cubin starts with \\x7fELF)")
    if data[4] != 2 or data[5] != 1:
        raise CubinError("not a little-endian 64-bit ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        raise CubinError("the ELF section header table is cut short or malformed")
    headers = []
    for k in range(shnum):
        name, _type, _flags, _addr, offset, size = struct.unpack_from(
            "<IIQQQQ", data, shoff + k * shentsize)
        headers.append((name, offset, size))
    names_offset = headers[shstrndx][1]
    sections = {}
    for name, offset, size in headers:
        end = data.index(b"\0", names_offset + name)
        sections[data[names_offset + name:end].decode(errors="replace")] = (offset, size)
    return sections


def disassemble(cubin: Cubin) -> list[str] | None:
    """nvdisasm's instructions of the cubin (addresses, `.reuse` flags and blanks
    dropped: it prints a padding `NOP` with a stall as `NOP ;`), or None where nvdisasm
    refuses an encoding."""
    try:
        text = sass_text(cubin.data)
    except DisassemblyError:
        return None
    return ["".join(_REUSE.sub("", line.split("*/", 1)[1]).split())
            for line in text.splitlines()
            if line.strip().startswith("/*") and ";" in line]


_REUSE = re.compile(r"\.reuse\b")


def same_instructions(original: list[str], edited: Cubin) -> bool:
    """Whether `edited` decodes (`disassemble`) to the instructions `original` lists."""
    return disassemble(edited) == original
