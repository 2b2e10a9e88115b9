"""The package's structure, checked from its source:

- the import direction between parts: dtypes <- layouts <- ir <- {vm, backend} <-
  cost <- tune <- kernels <- cli, and inside the backend analysis <- passes <- llvm,
  with cuda apart;
- no import cycle between modules;
- every import of a tilevm module at the top of its module (function-level imports are
  for optional third-party dependencies only), and no `# noqa: E402`;
- backend/analysis and backend/passes run without llvmlite and cuda-python;
- no module over 600 lines unless its docstring says why.

Every import in every module is parsed (absolute `tilevm.X` and relative alike).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tilevm"
MAX_LINES = 600

# What each part of the package may import from the package ("" is the root package).
ALLOWED: dict[str, set[str]] = {
    "dtypes": set(),
    "layouts": {"dtypes"},
    "ir": {"dtypes", "layouts"},
    "vm": {"dtypes", "layouts", "ir"},
    "backend": {"dtypes", "layouts", "ir"},
    "examples": {"dtypes", "layouts", "ir", "vm"},
    "cost": {"dtypes", "layouts", "ir", "backend"},  # of the backend, analysis only (below)
    # the tuning machinery (runner, searches, cache) below the kernels that declare
    # their spaces and use it
    "tune": {"dtypes", "layouts", "ir", "backend", "cost"},
    "kernels": {"dtypes", "layouts", "ir", "vm", "backend", "cost", "tune"},
    "bench": {"dtypes", "layouts", "ir", "vm", "backend", "cost", "kernels", ""},
    "cli": {"dtypes", "layouts", "ir", "vm", "backend", "cost", "kernels", "examples", "bench",
            "tune", ""},
    "": {"dtypes", "layouts", "ir", "vm", "backend", "cost", "kernels", "examples", "bench",
         "cli", "tune"},
}
SUBPACKAGES = {name for name in ALLOWED if name and (ROOT / name / "__init__.py").exists()}

# Inside the backend: what each layer may import of the backend. The modules at the top
# of backend/ (pipeline, cache, launch, ...) join the layers and may import any of them.
BACKEND_LAYERS: dict[str, set[str]] = {
    "analysis": set(),
    "passes": {"analysis"},
    "llvm": {"analysis", "passes"},
    "cuda": {"analysis", "ptxas"},
}
# Third-party modules a layer must not import, even indirectly.
HEAVY = ("llvmlite", "cuda")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def package_files() -> list[Path]:
    files = [p for p in ROOT.glob("*.py")]
    for sub in SUBPACKAGES:
        files += list((ROOT / sub).rglob("*.py"))
    return sorted(files)


@cache
def known_modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in package_files())


def imports_of(path: Path, source: str | None = None,
               tree: ast.Module | None = None) -> list[tuple[ast.stmt, list[str]]]:
    """Each import statement of the module and the tilevm modules it names (a name
    imported from a package is the submodule when one exists, else the package)."""
    if tree is None:
        tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
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
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known_modules()
                       or module == PACKAGE else module for alias in node.names]
        targets = [t for t in targets if t.split(".")[0] == PACKAGE]
        if targets:
            found.append((node, targets))
    return found


def part_of(module: str) -> str:
    """The top-level part of a tilevm module ("" = the root package, "cli" = cli/)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES | {"cli"} else ""


def imported_parts(path: Path, source: str | None = None) -> set[str]:
    return {part_of(t) for _, targets in imports_of(path, source) for t in targets}


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_import_direction(path: Path):
    rel = path.relative_to(ROOT)
    part = rel.parts[0] if len(rel.parts) > 1 else ("cli" if rel.stem == "cli" else "")
    bad = {imp for imp in imported_parts(path) if imp != part and imp not in ALLOWED[part]}
    assert not bad, f"{rel} imports {sorted(bad)}; {part or 'the root'} may import " \
                    f"{sorted(ALLOWED[part]) or 'nothing of tilevm'}"


def backend_layer(module: str) -> str | None:
    """The backend layer of a module (`analysis`, `passes`, `llvm`, `cuda`, or the name of
    a top-level backend module); None outside the backend."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "backend" else None


@pytest.mark.parametrize("path", sorted((ROOT / "backend").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_backend_layers(path: Path):
    layer = backend_layer(module_name(path))
    if layer not in BACKEND_LAYERS:
        return  # a module joining the layers (pipeline, cache, launch, ...)
    used = {backend_layer(t) for _, targets in imports_of(path) for t in targets} - {None}
    bad = used - BACKEND_LAYERS[layer] - {layer}
    assert not bad, f"{path.relative_to(ROOT)} (backend/{layer}) imports backend " \
                    f"{sorted(bad)}; it may import {sorted(BACKEND_LAYERS[layer]) or 'none'}"


@pytest.mark.parametrize("path", sorted((ROOT / "cost").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_cost_model_reads_only_the_backends_analysis(path: Path):
    """The cost model reads facts about a program (backend/analysis), never the code
    generator or the runtime: it runs on any machine, before anything is compiled."""
    used = {backend_layer(t) for _, targets in imports_of(path) for t in targets
            if t.startswith(f"{PACKAGE}.backend")}
    assert used <= {"analysis"}, f"{path.relative_to(ROOT)} imports backend {sorted(used)}"


def misplaced_imports(path: Path, source: str | None = None) -> list[str]:
    """tilevm imports that are not statements of the module's body (inside a function, a
    class, a try or an if), and `# noqa: E402` markers."""
    source = path.read_text() if source is None else source
    tree = ast.parse(source)
    top = {id(node) for node in tree.body}
    found = [f"line {node.lineno}: {ast.unparse(node)}"
             for node, _ in imports_of(path, tree=tree) if id(node) not in top]
    found += [f"line {i}: noqa E402" for i, line in enumerate(source.splitlines(), 1)
              if "noqa: E402" in line]
    return found


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_tilevm_imports_are_at_the_top(path: Path):
    found = misplaced_imports(path)
    assert not found, f"{path.relative_to(ROOT)} imports tilevm modules below its top: " \
                      + "; ".join(found)


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for path in package_files():
        name = module_name(path)
        graph[name] = {t for _, targets in imports_of(path) for t in targets
                       if t in known_modules() and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_checkers_can_fail(tmp_path: Path):
    probe = ROOT / "dtypes" / "_layering_probe.py"
    source = "from ..ir import stmt\nimport tilevm.vm\n\ndef f():\n    from tilevm import ir\n"
    assert imported_parts(probe, source) == {"ir", "vm"}
    node, targets = imports_of(probe, source)[-1]
    assert targets == ["tilevm.ir"] and node.lineno == 5
    assert misplaced_imports(probe, source) == ["line 5: from tilevm import ir"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


LIGHT_LAYERS = ("backend/analysis", "backend/passes", "cost")


def test_analysis_passes_and_cost_need_neither_llvmlite_nor_cuda():
    """Import every module of backend/analysis, backend/passes and cost in a fresh
    interpreter where llvmlite and cuda-python cannot be imported. The packages `tilevm`
    and `tilevm.backend` are stood in by bare packages so that their `__init__`
    re-exports (which do need llvmlite) are not what is tested."""
    modules = [module_name(p) for layer in LIGHT_LAYERS
               for p in sorted((ROOT / layer).rglob("*.py"))]
    assert modules, "backend/analysis and backend/passes hold no module"
    stand_ins = (("tilevm", str(ROOT)), ("tilevm.backend", str(ROOT / "backend")))
    script = textwrap.dedent(f"""
        import importlib, sys, types
        for blocked in {HEAVY!r}:
            sys.modules[blocked] = None
        for name, path in {stand_ins!r}:
            package = types.ModuleType(name)
            package.__path__ = [path]
            sys.modules[name] = package
        for module in {modules!r}:
            importlib.import_module(module)
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r}
                       and sys.modules[m] is not None)
        assert not heavy, heavy
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


def docstring_says_why(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return f"{MAX_LINES} lines" in doc


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_size(path: Path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES or docstring_says_why(path), \
        f"{path.relative_to(ROOT)} has {lines} lines (at most {MAX_LINES}, or its docstring " \
        f"says why it needs more)"
