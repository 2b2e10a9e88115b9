"""`VMError`, the error every check of a VM program raises, and `SourceLoc`, the user's
source line it points at."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLoc:
    """Where in the user's Python source an instruction or statement came from."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    @classmethod
    def parse(cls, text: str) -> SourceLoc | None:
        """The location `str()` wrote ("file:line"); None for "" or any other text."""
        file, _, line = text.rpartition(":")
        return cls(file, int(line)) if file and line.isdigit() else None


class VMError(Exception):
    """A program breaks a rule of the VM.

    The message names the rule; `instruction` is the offending instruction's text (as
    the printer writes it) and `loc` the user's source line, both shown by `str()`.
    """

    def __init__(self, message: str, instruction: str | None = None,
                 loc: SourceLoc | None = None) -> None:
        self.message = message
        self.instruction = instruction
        self.loc = loc
        super().__init__(str(self))

    def __str__(self) -> str:
        text = self.message
        if self.instruction:
            text += f"\n  in: {self.instruction}"
        if self.loc is not None:
            text += f"\n  at: {self.loc}"
            source = _source_line(self.loc)
            if source:
                text += f"\n      {source}"
        return text


def _source_line(loc: SourceLoc) -> str | None:
    try:
        import linecache

        return linecache.getline(loc.file, loc.line).strip() or None
    except Exception:  # a missing or unreadable file only loses the quote
        return None
