"""On-disk cache of generated datasets as .npy files, read back memory-mapped.

A built-in workload's data are generated once per set of options (the cache key) and every later
process maps them from disk in milliseconds instead of generating them again: `autospeed train`'s
start-up pays no data generation after the first run (experiments/startup.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Callable

import numpy as np

CACHE_ENV = "AUTOSPEED_CACHE_DIR"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "autospeed")


def cache_folder(name: str, key: dict) -> Path:
    """Where `cached_arrays(name, key, ...)` keeps its arrays: `<cache_dir>/<name>-<hash of key>`."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"{name}-{digest}"


def cached_arrays(name: str, key: dict, build: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Return build()'s arrays, generating them once per key and memory-mapping after.

    Each array is written to a temp file and renamed, and a manifest is written
    last, so concurrent trials and killed processes never see a partial cache.
    Where the cache folder cannot be written, the arrays are used from memory (one warning line).
    """
    folder = cache_folder(name, key)
    manifest = folder / "manifest.json"
    if not manifest.exists():
        arrays = build()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for array_name, array in arrays.items():
                tmp = folder / f".{array_name}.{os.getpid()}.npy"
                np.save(tmp, np.ascontiguousarray(array))
                os.replace(tmp, folder / f"{array_name}.npy")
            tmp = folder / f".manifest.{os.getpid()}.json"
            tmp.write_text(json.dumps({"key": key, "arrays": sorted(arrays)}))
            os.replace(tmp, manifest)
        except OSError as e:
            print(f"warning: cannot cache generated data in {folder} ({e}); every run generates it again; "
                  f"set {CACHE_ENV} to a writable folder", file=sys.stderr)
            return arrays
    names = json.loads(manifest.read_text())["arrays"]
    return {n: np.load(folder / f"{n}.npy", mmap_mode="r") for n in names}
