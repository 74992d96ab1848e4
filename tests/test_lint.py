"""The whole tree is clean under ruff with the repository's own configuration ([tool.ruff] in pyproject.toml:
line length 120, pyflakes, pycodestyle, import order). A finding fails the suite with ruff's own report."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> str | None:
    """The ruff executable: the one installed beside this Python (a virtual environment need not be on PATH),
    else the one on PATH."""
    beside = Path(sys.executable).parent / "ruff"
    return str(beside) if beside.is_file() else shutil.which("ruff")


def test_ruff_check_finds_nothing():
    ruff = _ruff()
    # a dev dependency, so installed wherever the suite runs (CI included): missing, the check fails, never skips
    assert ruff is not None, "ruff is not installed: pip install -e '.[dev]' (it is in the dev dependencies)"
    # --no-cache: the suite leaves no .ruff_cache behind in the checkout
    proc = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"ruff check . found problems:\n{proc.stdout}{proc.stderr}"
