"""The runnable examples of the user docs run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_language_guide_first_example_runs(tmp_path: Path):
    text = (DOCS / "language.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    code += "\nassert np.array_equal(out, x + y)\nprint('ok')\n"
    script = tmp_path / "guide_example.py"  # kernels must live in a file (their source is read)
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
