"""autospeed's version, as installed: pyproject.toml's `version`, the one place it is written. Standard library
only, so any layer may ask (autospeed.__version__, the environment a run records)."""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version


@lru_cache(maxsize=1)
def installed_version() -> str:
    """The installed distribution's version; "unknown" for a source tree on sys.path that was never installed."""
    try:
        return version("autospeed")
    except PackageNotFoundError:
        return "unknown"
