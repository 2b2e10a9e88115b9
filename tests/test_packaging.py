"""Every package directory is listed in pyproject.toml (a non-editable `pip install .`
installs only the listed ones)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_listed():
    text = (ROOT / "pyproject.toml").read_text()
    listed = set(re.findall(r'"(tilevm(?:\.\w+)*)"', text.split("packages = [")[1].split("]")[0]))
    found = {"tilevm"} | {
        "tilevm." + ".".join(p.parent.relative_to(ROOT).parts)
        for p in ROOT.rglob("__init__.py")
        if p.parent != ROOT and not {"tests", "build", ".venv"} & set(p.parts)
        and not any(part.startswith(".") or part.endswith(".egg-info")
                    for part in p.relative_to(ROOT).parts)}
    assert found == listed, f"unlisted: {sorted(found - listed)}, stale: {sorted(listed - found)}"
