"""Confirmation's fresh training process (autospeed.train.process): as `autospeed train` trains."""

from __future__ import annotations

import multiprocessing

from autospeed.recipe import Recipe
from autospeed.train.process import in_fresh_process, train_in_fresh_process

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
    assert in_fresh_process(_start_method) == multiprocessing.get_start_method()


def _start_method() -> str:  # a module function: pickled by name, run by the fresh process's own multiprocessing
    return multiprocessing.get_start_method()
