"""Data-parallel training (autospeed.train.distributed) in real torch.distributed process groups on CPU
(gloo): N workers of micro-batch B make the same update as one worker of batch N x B."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from autospeed.recipe import Recipe
from autospeed.train.throughput import PEAK_ENV
from autospeed.train.trainer import train
from autospeed.workloads import load_workload

# The digits MLP has no batch-dependent layers; an impossible target makes every run go all its steps.
EXACT = dict(workload="digits", target_accuracy=1.0, max_train_seconds=300, epochs=1, eval_every_epochs=0.5,
             lr=0.05, schedule="cosine", warmup_fraction=0.2, label_smoothing=0.1, seed=0)


def _trained(recipe: Recipe) -> tuple[dict, list[torch.Tensor]]:
    """(result object, final parameters) of `recipe` trained in this process."""
    digits = load_workload("digits")
    built = []

    def build():
        built.append(digits.build_model())
        return built[-1]

    # FLOPs counted (with AUTOSPEED_PEAK_TFLOPS set below), so every run reports its MFU per device
    result = train(recipe, dataclasses.replace(digits, build_model=build, train_flops_per_sample=1e6), num_threads=1)
    return result.to_dict(), [p.detach().clone() for p in built[0].parameters()]


def _worker(rank: int, world_size: int, rendezvous: str, recipes_json: list[str], out: str) -> None:
    """One worker of a gloo process group, as Ray Train sets it up; trains each recipe in turn in the
    same group (one process start for them all) and saves what it trained."""
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world_size)
    try:
        for i, recipe_json in enumerate(recipes_json):
            result, params = _trained(Recipe.model_validate_json(recipe_json))
            torch.save({"result": result, "params": params}, Path(out) / f"recipe{i}-rank{rank}.pt")
        # both ranks done before either tears the group down: a rank that destroyed it while the other's gloo
        # threads still talked to it aborted the other at exit ("terminate called without an active exception",
        # seen once under a loaded suite)
        dist.barrier()
    finally:
        dist.destroy_process_group()


PEAK_TFLOPS = 0.001  # a made-up device peak: these CPU workers' MFU is then a checkable number
PEAK_FLOPS = PEAK_TFLOPS * 1e12
CASES = [(16, 1, "device"), (8, 2, "device"), (16, 1, "dataloader")]  # batch_size, accumulation_steps, data_loader


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory) -> dict[tuple, list[dict]]:
    """Every case trained on 2 workers of one process group: case -> what each rank trained."""
    folder = tmp_path_factory.mktemp("two-workers")
    recipes = [Recipe(**EXACT, workers=2, batch_size=b, accumulation_steps=k, data_loader=loader).model_dump_json()
               for b, k, loader in CASES]
    written = [folder / f"recipe{i}-rank{rank}.pt" for i in range(len(CASES)) for rank in range(2)]
    with pytest.MonkeyPatch.context() as env:  # the spawned workers inherit it
        env.setenv(PEAK_ENV, str(PEAK_TFLOPS))
        try:
            mp.spawn(_worker, args=(2, str(folder / "rendezvous"), recipes, str(folder)), nprocs=2, join=True)
        except mp.ProcessExitedException as e:
            # A rank killed by a signal after both had written everything (past the barrier) died in gloo's own
            # teardown ("terminate called without an active exception", SIGABRT, seen under a loaded suite), not
            # in what this tests; anything earlier still fails. This fixture errored in 1 of 3 suite runs at
            # da15292 with no report kept (suite_durations.py keeps them since), so its cause is not known.
            if not all(p.exists() for p in written):
                raise
            warnings.warn(f"a gloo worker died at teardown after writing its results: {e}")
    return {case: [torch.load(folder / f"recipe{i}-rank{rank}.pt", weights_only=False)  # our own files
                   for rank in range(2)] for i, case in enumerate(CASES)}


@pytest.mark.parametrize("batch_size, accumulation_steps, data_loader", CASES)
def test_two_workers_make_the_update_of_one_worker_with_twice_the_batch(two_workers, batch_size, accumulation_steps,
                                                                       data_loader):
    two = two_workers[(batch_size, accumulation_steps, data_loader)]
    one_result, one = _trained(Recipe(**EXACT, batch_size=2 * batch_size, accumulation_steps=accumulation_steps,
                                      data_loader=data_loader))

    for rank in two:  # one run: the same steps, evaluations and samples on every worker
        assert rank["result"]["steps"] == one_result["steps"] == 1348 // (2 * batch_size * accumulation_steps)
        assert [e["samples"] for e in rank["result"]["history"]] == [e["samples"] for e in one_result["history"]]
        assert rank["result"]["environment"]["workers"] == 2 and rank["result"]["applied"]["workers"] == 2
        # MFU per device: both workers' samples/s over two devices' peaks (not one device's)
        assert rank["result"]["mfu"] == pytest.approx(rank["result"]["samples_per_second"] / 2 * 1e6 / PEAK_FLOPS)
        for a, b in zip(rank["params"], two[0]["params"]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)  # DDP keeps the replicas identical
    if data_loader == "device":
        # Each worker takes its half of the global batch one worker of 2B would take: the same trajectory.
        for a, b in zip(two[0]["params"], one):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        # The comparison has power: one worker of batch B ends elsewhere.
        _, small = _trained(Recipe(**EXACT, batch_size=batch_size, accumulation_steps=accumulation_steps))
        assert not all(torch.allclose(a, b, rtol=1e-3, atol=1e-4) for a, b in zip(small, one))
    else:
        # DistributedSampler shuffles differently from one DataLoader: the same maths, other samples per
        # step, so the two runs learn alike but not identically.
        assert abs(two[0]["result"]["best_val_accuracy"] - one_result["best_val_accuracy"]) < 0.1


def test_a_multi_worker_recipe_outside_a_process_group_says_how_to_run_it():
    with pytest.raises(RuntimeError, match="autospeed train"):
        train(Recipe(**EXACT, workers=2, batch_size=16))


def test_a_worker_in_a_group_of_one_trains_under_ddp_as_one_worker_would(tmp_path):
    """One Ray Train worker (a process group of one, how gpu_checks.sh runs NCCL DDP on one GPU) trains
    its `workers: 1` recipe under DDP, to the same parameters as the plain single-process path."""
    recipe = Recipe(**EXACT, batch_size=16)
    plain, plain_params = _trained(recipe)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        grouped, grouped_params = _trained(recipe)
    finally:
        dist.destroy_process_group()
    assert not plain["applied"]["ddp"] and grouped["applied"]["ddp"]
    assert grouped["applied"]["workers"] == 1
    for a, b in zip(plain_params, grouped_params):
        torch.testing.assert_close(a, b)
