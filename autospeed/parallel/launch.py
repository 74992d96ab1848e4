"""One recipe on N data-parallel workers through Ray Train's TorchTrainer (docs/design.md "Scale-out").

Ray Train starts the workers and their torch.distributed group (gloo on CPU, NCCL with one GPU per
worker); each runs the ordinary trainer, which trains under DDP (autospeed.train.distributed).
- `autospeed train` and confirmation runs call `train_on_workers`: the TorchTrainer fitted directly, without
  Tune, on a local Ray it starts (and stops) unless the process has joined one.
- A search's data-parallel trial drives the same `fit` from inside its Tune trial (Ray's Train-in-Tune
  pattern): search/trainable.py, with the search's own stop protocol (search/data_parallel.py).
A recipe with `workers: 1` never comes here: it trains in the calling process, as always.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Callable

from autospeed.errors import UserError
from autospeed.recipe import Recipe


def worker_threads(workers: int, cpus: float) -> int:
    """torch threads per worker: the cores split evenly, at least one each."""
    return max(1, int(cpus) // workers)


def placement_problem(workers: int, cpus: float, gpus: int, cluster_gpus: float) -> str | None:
    """Why `workers` workers of one run cannot be placed (None: they can). On GPUs each worker
    takes one whole GPU; on CPU each takes at least one of the run's `cpus` cores."""
    if gpus:
        if gpus > 1:
            return (f"each of the {workers} workers takes one GPU (DDP), but gpus_per_trial is {gpus}; "
                    f"set gpus_per_trial: 1")
        if workers > cluster_gpus:
            return (f"{workers} workers need {workers} GPUs (one each) but Ray sees {int(cluster_gpus)}; "
                    f"lower the workers to {int(cluster_gpus) or 1} or join a cluster with more GPUs")
        return None
    if workers > int(cpus):
        return (f"{workers} workers need at least one CPU core each but a trial has {int(cpus)} "
                f"(cpus_per_trial, else the largest node's cores); lower the workers to {max(1, int(cpus))}")
    return None


def fit(worker_fn: Callable[[dict], None], config: dict[str, Any], *, workers: int, cpus: float, gpus: bool,
        storage_path: str, name: str, driver_cpus: float = 0.0, callbacks: list | None = None):
    """Run `worker_fn(config)` on `workers` Ray Train workers; the Train Result (rank 0's last report).

    The workers share `cpus` logical CPUs less the driver's; each gets one GPU when `gpus`."""
    import ray.train
    from ray.train.torch import TorchTrainer

    per_worker = {"CPU": (cpus - driver_cpus) / workers, **({"GPU": 1} if gpus else {})}
    trainer = TorchTrainer(
        worker_fn, train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(num_workers=workers, use_gpu=gpus, resources_per_worker=per_worker),
        # a failed worker fails the run: like a one-process run, it is never retried
        run_config=ray.train.RunConfig(name=name, storage_path=storage_path, callbacks=callbacks,
                                       failure_config=ray.train.FailureConfig(max_failures=0)),
    )
    return trainer.fit()


def _recipe_worker(config: dict[str, Any]):
    """One Ray Train worker of `train_on_workers`: the trainer on this worker's shard. Ray Train
    hands rank 0's return value back as the run's `return_value`."""
    from autospeed.train.trainer import train

    if config.get("inductor_cache_dir"):  # a cold compile: the run's own empty folder, shared by its workers
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = config["inductor_cache_dir"]
        os.environ["TRITON_CACHE_DIR"] = os.path.join(config["inductor_cache_dir"], "triton")
    return train(Recipe.model_validate_json(config["recipe"]), num_threads=config["threads"])


def train_on_workers(recipe: Recipe, cpus: float | None = None, gpus: bool | None = None,
                     compile_cache: str = "warm"):
    """Train `recipe` on its `workers` Ray Train workers, without Tune: rank 0's TrainResult.
    `compile_cache="cold"` (confirmation's default): the workers compile from a new empty inductor cache
    folder (one for the run, as the workers of one node share one in production), removed after.

    Starts a local Ray (and stops it after) unless this process has joined one already. `cpus`:
    logical CPUs for all workers together (default: every core of this machine); `gpus`: one GPU
    per worker (default: when the recipe's device allows it and Ray sees GPUs)."""
    import ray

    from autospeed import _ray

    def placed(cluster: dict[str, float]) -> tuple[float, bool]:
        """(cpus, gpus) for the workers on `cluster`'s resources; bad input where they cannot be placed."""
        want_cpus = cpus or cluster.get("CPU") or os.cpu_count() or 1
        want_gpus = gpus if gpus is not None else recipe.device != "cpu" and cluster.get("GPU", 0) > 0
        problem = placement_problem(recipe.workers, want_cpus, int(want_gpus), cluster.get("GPU", 0))
        if problem:
            raise UserError(f"key 'workers': {problem}")
        return want_cpus, bool(want_gpus)

    started = not ray.is_initialized()
    if started:
        import torch

        # The local Ray about to start sees at most this machine's cores and GPUs: refused before it starts.
        placed({"CPU": os.cpu_count() or 1, "GPU": torch.cuda.device_count()})
        _ray.quiet_ray()
        _ray.start_ray(None, verbose=False)
    storage = tempfile.mkdtemp(prefix="autospeed-train-")  # Ray Train's run state; nothing of it is kept
    try:
        cpus, gpus = placed(ray.cluster_resources())  # what Ray sees decides (a container's CPU quota, say)
        config = {"recipe": recipe.model_dump_json(), "threads": worker_threads(recipe.workers, cpus),
                  "inductor_cache_dir": os.path.join(storage, "inductor") if compile_cache == "cold" else None}
        result = fit(_recipe_worker, config, workers=recipe.workers, cpus=cpus, gpus=bool(gpus),
                     storage_path=storage, name="train")
    finally:
        shutil.rmtree(storage, ignore_errors=True)
        if started:
            _ray.stop_ray()
    return result.return_value
