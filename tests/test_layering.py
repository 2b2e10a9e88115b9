"""The package's import direction: dtypes <- layouts <- ir <- {vm, backend} <- kernels <- cli.

Every import in every module is parsed (absolute `tilevm.X` and relative alike) and
checked against the layer the module lives in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tilevm"

# What each part of the package may import from the package.
ALLOWED: dict[str, set[str]] = {
    "dtypes": set(),
    "layouts": {"dtypes"},
    "ir": {"dtypes", "layouts"},
    "vm": {"dtypes", "layouts", "ir"},
    "backend": {"dtypes", "layouts", "ir"},
    "examples": {"dtypes", "layouts", "ir", "vm"},
    "kernels": {"dtypes", "layouts", "ir", "vm", "backend"},
    "bench": {"dtypes", "layouts", "ir", "vm", "backend", "kernels", ""},
    "cli": {"dtypes", "layouts", "ir", "vm", "backend", "kernels", "examples", "bench", ""},
    "": {"dtypes", "layouts", "ir", "vm", "backend", "kernels", "examples", "bench", "cli"},
}
SUBPACKAGES = {name for name in ALLOWED if name and (ROOT / name / "__init__.py").exists()}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def imported_parts(path: Path) -> set[str]:
    """The first component under `tilevm` of everything the module imports ("" = the root)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from tilevm import dtypes` imports the subpackage, not the root.
            targets = [f"{module}.{alias.name}" if module == PACKAGE else module
                       for alias in node.names]
        for target in targets:
            parts = target.split(".")
            if parts[0] != PACKAGE:
                continue
            found.add(parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES | {"cli"} else "")
    return found


def package_files() -> list[Path]:
    files = [p for p in ROOT.glob("*.py")]
    for sub in SUBPACKAGES:
        files += list((ROOT / sub).rglob("*.py"))
    return sorted(files)


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_import_direction(path: Path):
    rel = path.relative_to(ROOT)
    part = rel.parts[0] if len(rel.parts) > 1 else ("cli" if rel.stem == "cli" else "")
    bad = {imp for imp in imported_parts(path) if imp != part and imp not in ALLOWED[part]}
    assert not bad, f"{rel} imports {sorted(bad)}; {part or 'the root'} may import " \
                    f"{sorted(ALLOWED[part]) or 'nothing of tilevm'}"


def test_checker_catches_a_violation(tmp_path: Path, monkeypatch):
    # The checker itself must be able to fail: a dtypes module importing the IR.
    fake = ROOT / "dtypes" / "_layering_probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self: "from ..ir import x\nimport tilevm.vm\n")
    assert imported_parts(fake) == {"ir", "vm"}
