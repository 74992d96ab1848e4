"""The trainer on a CUDA GPU: every knob value runs and is applied, OOM is a status, memory is per run.

Skipped where no GPU is visible (CI); run on a GPU machine with `pytest -m cuda`.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.train.trainer import train
from autospeed.workloads import load_workload

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# Small synthetic images: every knob applies to them (channels_last, cudnn) and a run takes seconds.
IMAGES = dict(workload="synthetic", workload_options={"num_samples": 4000, "image_size": 16, "widths": [16, 32],
                                                      "noise": 2.0},
              target_accuracy=0.9, max_train_seconds=120, epochs=4, eval_every_epochs=1, batch_size=64,
              lr=0.05, seed=0, device="cuda")


def recipe(**overrides) -> Recipe:
    return Recipe(**{**IMAGES, **overrides})


@pytest.fixture(scope="module")
def images():
    return load_workload("synthetic", IMAGES["workload_options"])


EVERY_KNOB = [
    ({"precision": "fp32"}, {"tf32": False, "autocast": "none", "grad_scaler": False}),
    ({"precision": "tf32"}, {"tf32": True, "autocast": "none"}),
    ({"precision": "bf16"}, {"autocast": "bfloat16", "grad_scaler": False}),
    ({"precision": "fp16"}, {"autocast": "float16", "grad_scaler": True}),
    ({"channels_last": True}, {"channels_last": True}),
    ({"cudnn_benchmark": True}, {"cudnn_benchmark": True}),
    ({"data_loader": "dataloader", "num_workers": 2, "pin_memory": True, "persistent_workers": True},
     {"pin_memory": True, "data_loader": "dataloader"}),
    ({"data_loader": "dataloader", "num_workers": 0, "pin_memory": False}, {"pin_memory": False}),
    ({"accumulation_steps": 2, "batch_size": 32}, {"accumulation_steps": 2}),
    ({"activation_checkpointing": True}, {"activation_checkpointing": True}),
    ({"precision": "bf16", "channels_last": True, "cudnn_benchmark": True}, {"channels_last": True}),
]


@pytest.mark.parametrize("overrides,applied", EVERY_KNOB, ids=lambda v: str(v) if isinstance(v, dict) else "")
def test_every_knob_value_trains_on_cuda_and_is_applied(images, overrides, applied):
    result = train(recipe(**overrides), images)
    assert result.status == Status.REACHED, result.error
    assert result.applied["device"] == "cuda"
    assert {k: result.applied[k] for k in applied} == applied
    assert result.environment["device"] == "cuda" and result.environment["cuda"]
    assert result.peak_memory_mb and result.peak_memory_mb > 0


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
def test_every_compile_mode_trains_on_cuda_and_charges_its_compile_time(images, mode):
    result = train(recipe(compile=mode), images)
    assert result.status == Status.REACHED, result.error
    assert result.applied["compile"] == mode
    assert 0 < result.compile_seconds == result.first_step_seconds <= result.train_seconds
    assert result.tta_seconds >= result.compile_seconds  # compilation is on the train clock


@pytest.mark.parametrize("mode,used", [("reduce-overhead", "default"), ("max-autotune", "max-autotune-no-cudagraphs")])
def test_cuda_graph_modes_with_accumulation_compile_without_cuda_graphs(images, mode, used):
    """CUDA graphs cannot accumulate gradients (pytorch#169545): the trainer says which mode it used."""
    result = train(recipe(compile=mode, accumulation_steps=2, batch_size=32), images)
    assert result.status == Status.REACHED, result.error
    assert result.applied["compile"] == used


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_compiled_mixed_precision_trains_as_eager_does(images, precision):
    runs = {mode: train(recipe(compile=mode, precision=precision, target_accuracy=1.0, epochs=2), images)
            for mode in ("none", "default")}
    losses = {mode: [round(h["train_loss"], 3) for h in r.history] for mode, r in runs.items()}
    assert all(r.status == Status.NOT_REACHED for r in runs.values()), losses
    assert runs["default"].history[-1]["train_loss"] < 1.5 * runs["none"].history[-1]["train_loss"], losses


class _Allocates(nn.Module):
    """A model whose forward asks the CUDA allocator for `gib` GiB: a real torch.OutOfMemoryError."""

    def __init__(self, gib: float):
        super().__init__()
        self.gib = gib
        self.linear = nn.Linear(16 * 16 * 3, 10)

    def forward(self, x):
        if self.gib:
            x = x + x.new_empty(int(self.gib * 2**30) // x.element_size()).sum()  # noqa: F841
        return self.linear(x.flatten(1))


def test_a_real_cuda_oom_is_status_oom_and_frees_the_gpu_for_the_next_run(images):
    huge = dataclasses.replace(images, build_model=lambda: _Allocates(4096), images=False)
    result = train(recipe(), huge)
    assert result.status == Status.OOM
    assert result.error.startswith("OutOfMemoryError")
    after = train(recipe(), images)  # same process, same GPU
    assert after.status == Status.REACHED, after.error


def test_peak_memory_is_this_runs_not_the_process_high_water_mark(images):
    big = train(recipe(batch_size=1024, epochs=1, eval_every_epochs=1, target_accuracy=1.0), images)
    small = train(recipe(batch_size=16, epochs=1, eval_every_epochs=1, target_accuracy=1.0), images)
    assert big.peak_memory_mb > 2 * small.peak_memory_mb


class _Spins(nn.Module):
    """Each forward keeps the GPU busy for a while without the host waiting (an async kernel)."""

    def __init__(self, cycles: int):
        super().__init__()
        self.cycles = cycles
        self.linear = nn.Linear(16 * 16 * 3, 10)

    def forward(self, x):
        torch.cuda._sleep(self.cycles)
        return self.linear(x.flatten(1))


def test_the_train_clock_waits_for_the_gpu(images):
    """Kernels run asynchronously: a clock read without synchronising would miss the GPU's work."""
    cycles = 50_000_000  # tens of milliseconds per step on a 1-2 GHz GPU
    for _ in range(4):  # the GPU's clock rises under load: time the spin at the speed training will see
        torch.cuda._sleep(cycles)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(8):
        torch.cuda._sleep(cycles)
    stop.record()
    torch.cuda.synchronize()
    eight_spins_seconds = start.elapsed_time(stop) / 1000
    spinning = dataclasses.replace(images, build_model=lambda: _Spins(cycles), images=False)
    result = train(recipe(target_accuracy=1.0, epochs=1, eval_every_epochs=1, batch_size=500), spinning)
    assert result.steps == 8
    assert result.train_seconds >= 0.9 * eight_spins_seconds
