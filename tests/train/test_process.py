"""Confirmation's fresh training process (autospeed.train.process): as `autospeed train` trains."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pydantic
import pytest

from autospeed.recipe import Recipe
from autospeed.run_recipe import train_in_fresh_process
from autospeed.train.process import in_fresh_process

from . import fresh_process_probes as probes  # what a fresh process reports; it imports no torch

# Digits reaches 0.95 in 2-3 epochs, in well under a second.
REACHES = dict(workload="digits", target_accuracy=0.95, max_train_seconds=30, epochs=5, eval_every_epochs=1,
               batch_size=32, lr=0.1, seed=0)


def test_a_fresh_process_run_whose_dataloader_starts_workers_trains():
    """gpu.yaml's baseline loads with 8 DataLoader workers: its confirmation runs must be able to start them
    (a daemonic pool worker may not have children, and failed every such run)."""
    result = train_in_fresh_process(Recipe(**REACHES, data_loader="dataloader", num_workers=1), 1)

    assert result.status == "reached", result.error
    assert result.applied["data_loader"] == "dataloader"


def test_a_fresh_process_starts_its_dataloader_workers_as_autospeed_train_does():
    """A spawned process defaults to spawning its own children: its DataLoader workers would each start a new
    interpreter (every epoch), 4x slower than the forked workers `autospeed train` gets on Linux."""
    assert in_fresh_process(probes.start_method) == multiprocessing.get_start_method()


def test_a_fresh_process_imports_only_what_its_function_needs():
    """The fresh process (autospeed.train.process) brings no Ray, MLflow or Optuna from the driver, and no torch
    of its own: what the function it runs imports is all it pays for (these probes: the standard library)."""
    assert in_fresh_process(probes.imported, ("ray", "mlflow", "optuna", "torch")) == []


def test_a_cold_fresh_process_compiles_from_an_empty_inductor_cache_of_its_own(tmp_path, monkeypatch):
    """Confirmation's default (confirm.compile_cache: cold): each run compiles as production pays it on a new
    machine, not from the graphs earlier runs left in the machine's shared inductor folder; the folder is
    removed after the run. Two runs never share one."""
    shared = tmp_path / "shared-inductor"
    (shared / "fxgraph").mkdir(parents=True)  # what an earlier compile on this machine left
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(shared))

    first = in_fresh_process(probes.inductor_cache, compile_cache="cold")
    second = in_fresh_process(probes.inductor_cache, compile_cache="cold")

    for folder, held, triton in (first, second):
        assert folder is not None and Path(folder) != shared
        assert held == [], f"the cold process's inductor folder held {held}"
        assert triton is not None and Path(triton).parent == Path(folder)  # GPU kernels cold too
        assert not Path(folder).exists()  # removed after the run
    assert first[0] != second[0]


def test_a_warm_fresh_process_keeps_the_machines_shared_inductor_cache(tmp_path, monkeypatch):
    shared = tmp_path / "shared-inductor"
    (shared / "fxgraph").mkdir(parents=True)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(shared))

    assert in_fresh_process(probes.inductor_cache, compile_cache="warm")[:2] == (str(shared), ["fxgraph"])
    with pytest.raises(ValueError, match="cold"):
        in_fresh_process(probes.inductor_cache, compile_cache="lukewarm")


def test_confirmation_trains_cold_unless_the_space_file_asks_for_warm(monkeypatch):
    """train_like_production (every confirmation and ablation run) starts its fresh process cold by default,
    warm with `confirm.compile_cache: warm`; any other value is refused when the space file is read."""
    from autospeed.search.confirm_sample import train_like_production
    from autospeed.space import SearchSpec
    from autospeed.train import process

    asked = []
    monkeypatch.setattr(process, "in_fresh_process",
                        lambda fn, *args, compile_cache, inductor_cache_dir=None: asked.append(compile_cache))
    spec = {"name": "n", "workload": "digits", "target_accuracy": 0.9, "budget": {"trials": 1},
            "space": {"lr": {"loguniform": [0.01, 0.1]}}}
    for confirm, expected in (({}, "cold"), ({"compile_cache": "warm"}, "warm"), ({"compile_cache": "cold"}, "cold")):
        train_like_production(Recipe(**REACHES), SearchSpec.model_validate({**spec, "confirm": confirm}))
        assert asked.pop() == expected
    with pytest.raises(pydantic.ValidationError, match="compile_cache"):
        SearchSpec.model_validate({**spec, "confirm": {"compile_cache": "lukewarm"}})


def test_a_data_parallel_confirmation_run_compiles_cold_on_its_workers(monkeypatch):
    """Data-parallel confirmation runs (Ray Train workers) get the space file's setting too, and a cold run's
    workers point inductor (and Triton) at the run's own folder before training."""
    import os

    from autospeed.parallel import launch
    from autospeed.search.confirm_sample import train_like_production
    from autospeed.space import SearchSpec
    from autospeed.train import trainer

    asked = []
    monkeypatch.setattr(launch, "train_on_workers", lambda recipe, cpus, gpus, compile_cache:
                        asked.append(compile_cache))
    spec = {"name": "n", "workload": "digits", "target_accuracy": 0.9, "budget": {"trials": 1},
            "space": {"lr": {"loguniform": [0.01, 0.1]}}}
    for confirm, expected in (({}, "cold"), ({"compile_cache": "warm"}, "warm")):
        train_like_production(Recipe(**REACHES, workers=2), SearchSpec.model_validate({**spec, "confirm": confirm}))
        assert asked.pop() == expected

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/shared")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)  # restored after: the worker sets it
    monkeypatch.setattr(trainer, "train", lambda recipe, num_threads: (os.environ["TORCHINDUCTOR_CACHE_DIR"],
                                                                        os.environ.get("TRITON_CACHE_DIR")))
    config = {"recipe": Recipe(**REACHES).model_dump_json(), "threads": 1}
    assert launch._recipe_worker({**config, "inductor_cache_dir": None})[0] == "/shared"
    assert launch._recipe_worker({**config, "inductor_cache_dir": "/run/inductor"}) == (
        "/run/inductor", "/run/inductor/triton")


def test_a_cold_confirmation_run_compiles_away_from_the_shared_folder_and_still_saves_the_shipped_cache(
        tmp_path, monkeypatch):
    """The one compile in this file: a compiled recipe trained as confirmation trains it (cold) writes nothing
    to the machine's shared inductor folder, and its torch.compile cache artifacts (what export ships beside
    best.yaml) are still saved."""
    shared = tmp_path / "shared-inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(shared))
    cache = tmp_path / "compile-cache.bin"
    recipe = Recipe(workload="digits", target_accuracy=0.2, max_train_seconds=120, epochs=1, eval_every_epochs=1,
                    batch_size=100, lr=0.05, compile="default")

    result = train_in_fresh_process(recipe, 1, compile_cache_to=str(cache))

    assert result.applied["compile"] == "default" and result.error is None, result.error
    assert result.compile_seconds > 0
    assert not shared.exists() or not any(shared.iterdir()), sorted(p.name for p in shared.iterdir())
    assert cache.stat().st_size > 0
