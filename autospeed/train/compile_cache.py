"""The compile cache shipped with a recipe (docs/design.md "Compile cache shipped with a recipe").

torch.compile pays its compile in every fresh process. torch's portable cache artifacts
(`torch.compiler.save_cache_artifacts` / `load_cache_artifacts`, the "mega-cache") carry what one
process compiled to another machine: the FX graphs inductor generated, AOTAutograd's entries, dynamic-shape
profiles and, on CUDA, the Triton kernels themselves. Loading them fills the local inductor cache
(TORCHINDUCTOR_CACHE_DIR), so the next torch.compile of the same model hits it, in this process and in
any other on this node that shares the folder (data-parallel workers, a user's script).

What they do not carry: on CPU, inductor's C++ kernels are compiled again from the cached source (the
shared objects are not in the artifacts); cudnn's benchmark choices have no cache at all. A cache made
with another torch, device or model is not an error: its entries are simply never hit.

Where a cache comes from: a process that trained only the winning recipe (a confirmation run, each in a
fresh process: autospeed.train.process), saved after its run. Torch only, like the rest of train/.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from autospeed.yamlio import atomic_path


def save(path: str | os.PathLike) -> int | None:
    """Write every compile artifact this process recorded to `path` (atomically); the artifacts' count, or None
    (nothing written) when nothing was compiled. Call it in a process that compiled only the recipe the cache is
    for: torch records every compile of the process."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return None
    data, info = saved
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return sum(len(keys) for keys in info.artifacts.values())


@dataclass
class Loaded:
    """A cache loaded into the local inductor cache: how many artifacts of each kind (inductor, aot_autograd,
    pgo, autotune, ...)."""

    artifacts: dict[str, int]

    def describe(self) -> str:
        return ", ".join(f"{n} {kind}" for kind, n in sorted(self.artifacts.items())) or "no artifacts"


class CacheNotLoaded(Exception):
    """The file is missing, unreadable or not torch's cache artifacts (one line: why)."""


@contextlib.contextmanager
def _quiet_torch_cache_log():
    """torch logs a corrupt file's traceback at WARNING; the caller says it in one line instead."""
    logger = logging.getLogger("torch.compiler._cache")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def load(path: str | os.PathLike) -> Loaded:
    """Load the cache at `path` into the local inductor cache, before torch.compile runs. Raises CacheNotLoaded
    (missing, unreadable, corrupt: torch's checksum) for the caller to warn about; training then compiles from
    scratch."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CacheNotLoaded(f"{path} is missing") from None
    except OSError as e:
        raise CacheNotLoaded(f"{path} cannot be read ({e.strerror or e})") from None
    with _quiet_torch_cache_log():
        info = torch.compiler.load_cache_artifacts(data)
    if info is None:
        raise CacheNotLoaded(f"{path} is not torch.compile cache artifacts (corrupt, or empty)")
    return Loaded({kind: len(keys) for kind, keys in info.artifacts.items()})


def graph_hits() -> tuple[int, int]:
    """(hits, misses) of inductor's FX graph cache in this process so far: whether a loaded cache was used
    (torch._dynamo's counters, which torch's own cache tests read)."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


def hits_line(shipped: bool) -> str:
    """One line saying where this process's compiled graphs came from (graph_hits), after it compiled: from the
    shipped cache (`shipped`: it was loaded into the local inductor cache first), else from this machine's own
    inductor cache (warm: graphs an earlier run on this machine left) or from nothing (cold: as a new machine
    compiles). So a run says which of docs/design.md "Compile cost as production pays it"'s three ways it was."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    hits, misses = graph_hits()
    if shipped:
        return f"compile cache: {hits} of {hits + misses} compiled graphs found in it"
    how = ("warm: graphs an earlier run on this machine compiled; a new machine compiles them again" if hits else
           "cold: compiled from scratch, as on a new machine")
    return f"compile: {hits} of {hits + misses} compiled graphs found in this machine's inductor cache " \
           f"({cache_dir()}), {how}"


def load_shipped(recipe, config: str, out):
    """Load the recipe's shipped compile cache (`measured.compile_cache`, a file beside the recipe) before anything
    compiles; it fills the local inductor cache, which this process and its workers on this node read. A missing
    or corrupt file is one warning line, and training compiles from scratch; a cache from another torch or device
    is no error, its graphs are just not found. Returns what was loaded, or None."""
    name = recipe.measured.compile_cache if recipe.measured is not None else None
    if not name or recipe.compile == "none":
        return None
    path = Path(config).parent / name
    try:
        loaded = load(path)
    except CacheNotLoaded as e:
        print(f"warning: {config}: compile cache not loaded: {e}; torch.compile compiles from scratch",
              file=sys.stderr)
        return None
    print(f"compile cache: loaded {path} ({loaded.describe()} artifacts)", file=out)
    return loaded
