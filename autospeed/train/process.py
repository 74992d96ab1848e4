"""Training in a process of its own, away from the search's driver: where confirmation runs train.

The driver holds Ray's, MLflow's and Optuna's state: their threads, and a Python heap about twice a
bare trainer's, which every full garbage collection walks. A recipe that takes many small steps per
second trains measurably slower there: fast.yaml's baseline (batch 32) reached its target in 21.0 s
in the driver against 13.6 s as trial 0 of the same search (in a Ray worker), on the 2-core CPU
machine. So confirmation runs, like trials and like a production `autospeed train`, train in a
process that does nothing else:

* `train_in_fresh_process`: a new (spawned) process per run, as `autospeed train --config best.yaml`
  is. Its cold start (on a GPU: CUDA context, cuDNN/cuBLAS handles, kernel loading, 1.0 s against 0.01 s
  warm on an H100, experiments/results/gpu/cold_start_gpu.md) is on the run's train clock, and its
  interpreter start, imports and data loading are in its `wall_to_target_seconds`, which counts from
  the process's start (autospeed.train.result).
* `LeanProcess`: one spawned process that trains several runs one after another and loads each
  workload once. Only its first run's wall to target counts from the process start; later runs count
  from their `train()` call (their `wall_clock_origin` says so), so their walls are not a fresh process's.

This module imports the trainer only (no Ray, MLflow or Optuna), so neither does the process.
"""

from __future__ import annotations

import multiprocessing
import signal

from autospeed.recipe import Recipe


def _ignore_ctrl_c() -> None:
    """In the training process: Ctrl-C reaches the whole process group, but the driver decides what it
    means (it ends its runs as KILLED and then terminates this process), so no second traceback here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _train_here(recipe: Recipe, threads: int | None, compile_cache_to: str | None = None):
    from autospeed.train.trainer import train
    from autospeed.workloads import load_workload_once

    result = train(recipe, load_workload_once(recipe.workload, recipe.workload_options), num_threads=threads)
    if compile_cache_to is not None and result.applied.get("compile", "none") != "none":
        from autospeed.train import compile_cache

        compile_cache.save(compile_cache_to)  # what this process compiled: this recipe's graphs only
    return result


class LeanProcess:
    """One spawned process that trains recipes one at a time (`with LeanProcess() as p: p.train(...)`).
    It starts on the first `train`; leaving the block by an exception (Ctrl-C included) terminates it,
    whatever it was doing."""

    def __init__(self):
        self._pool = None

    def train(self, recipe: Recipe, threads: int | None, compile_cache_to: str | None = None):
        """`train(recipe)` there; with `compile_cache_to`, a compiled run also saves the compile artifacts the
        process recorded to that file (autospeed.train.compile_cache): ask it of a process's only run, since
        they are every compile of the process."""
        if self._pool is None:
            self._pool = multiprocessing.get_context("spawn").Pool(1, initializer=_ignore_ctrl_c)
        return self._pool.apply(_train_here, (recipe, threads, compile_cache_to))

    def __enter__(self) -> "LeanProcess":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._pool is None:
            return
        if exc_type is None:
            self._pool.close()
        else:
            self._pool.terminate()
        self._pool.join()


def train_in_fresh_process(recipe: Recipe, threads: int | None, compile_cache_to: str | None = None):
    """`train(recipe)` in a new (spawned) process: the cold start a production run pays is on its clock. With
    `compile_cache_to`, a compiled run leaves its torch.compile cache artifacts in that file (the winner's is
    exported beside best.yaml)."""
    with LeanProcess() as process:
        return process.train(recipe, threads, compile_cache_to)
