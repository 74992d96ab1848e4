"""On-disk cache of generated datasets as .npy files, read back memory-mapped."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import numpy as np

CACHE_ENV = "AUTOSPEED_CACHE_DIR"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "autospeed")


def cached_arrays(name: str, key: dict, build: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Return build()'s arrays, generating them once per key and memory-mapping after.

    Each array is written to a temp file and renamed, and a manifest is written
    last, so concurrent trials and killed processes never see a partial cache.
    """
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    folder = cache_dir() / f"{name}-{digest}"
    manifest = folder / "manifest.json"
    if not manifest.exists():
        arrays = build()
        folder.mkdir(parents=True, exist_ok=True)
        for array_name, array in arrays.items():
            tmp = folder / f".{array_name}.{os.getpid()}.npy"
            np.save(tmp, np.ascontiguousarray(array))
            os.replace(tmp, folder / f"{array_name}.npy")
        tmp = folder / f".manifest.{os.getpid()}.json"
        tmp.write_text(json.dumps({"key": key, "arrays": sorted(arrays)}))
        os.replace(tmp, manifest)
    names = json.loads(manifest.read_text())["arrays"]
    return {n: np.load(folder / f"{n}.npy", mmap_mode="r") for n in names}
