"""Shared fixtures: a private dataset cache, a CLI runner, recipe and plugin writers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from autospeed.workloads import CACHE_ENV


@pytest.fixture(scope="session", autouse=True)
def dataset_cache(tmp_path_factory) -> Path:
    """Generated datasets go to a per-session folder, never to ~/.cache; subprocesses inherit it."""
    folder = tmp_path_factory.mktemp("autospeed-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(folder))
        yield folder


@pytest.fixture
def write_recipe(tmp_path):
    """write_recipe(dict or YAML text, name=...) -> path of a recipe file in tmp_path."""

    def write(content: dict | str, name: str = "recipe.yaml") -> Path:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
        return path

    return write


@pytest.fixture
def write_plugin(tmp_path, monkeypatch):
    """write_plugin(module_name, source) -> folder; the module imports here and in CLI subprocesses."""

    def write(module_name: str, source: str) -> Path:
        (tmp_path / f"{module_name}.py").write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
        return tmp_path

    return write


@pytest.fixture
def run_cli(tmp_path):
    """run_cli(*args, cwd=tmp_path, env=None) -> CompletedProcess of `python -m autospeed ARGS`."""

    def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autospeed", *args], cwd=cwd or tmp_path,
                              env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout)

    return run
