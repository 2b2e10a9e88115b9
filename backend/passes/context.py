"""What every pass is given besides the program: `PassContext`, the target it compiles
for (and, as options appear, the options of the compilation). Every pass is
`run(program, context) -> program`, so `pipeline.run_passes` calls them all alike."""

from __future__ import annotations

from dataclasses import dataclass

from tilevm.backend.analysis.target import Target, target


@dataclass(frozen=True)
class PassContext:
    """The compilation a pass runs in: `arch`, the GPU architecture (`--arch`), or None
    when the passes run for no particular target (then no pass selects an instruction
    that exists on some architectures only, such as TMA copies or `stmatrix`)."""

    arch: str | None = None

    @property
    def target(self) -> Target | None:
        """The architecture's `Target` (an unknown arch raises `TargetError`)."""
        return None if self.arch is None else target(self.arch)


DEFAULT_CONTEXT = PassContext()
