"""Tokens/s and MFU: a workload that counts tokens and FLOPs gets them in every evaluation and the result."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from autospeed.recipe import Recipe
from autospeed.train.throughput import PEAK_ENV, peak_flops, rates
from autospeed.train.trainer import train
from autospeed.workloads import load_workload

RECIPE = dict(workload="digits", target_accuracy=0.95, max_train_seconds=30, epochs=2, eval_every_epochs=1,
              batch_size=32, lr=0.1, seed=0)


@pytest.mark.parametrize("name, tflops", [
    ("NVIDIA H100 80GB HBM3", 989.4), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H200", 989.4),
    ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA L4", 121.0), ("NVIDIA L40", 181.0), ("NVIDIA L40S", 362.1),
    ("NVIDIA H100 NVL", 835.0), ("NVIDIA GH200 480GB", 989.4), ("NVIDIA A10G", 70.0), ("NVIDIA A10", 125.0),
    ("AMD EPYC 7B13", None), ("Some Future GPU", None), ("NVIDIA L400", None),
])
def test_dense_bf16_peak_by_device_name(name, tflops, monkeypatch):
    """The model's words matched whole: an L40 is not an L4 (a substring match gave it the L4's 121)."""
    monkeypatch.delenv(PEAK_ENV, raising=False)
    assert peak_flops(name) == (tflops * 1e12 if tflops else None)


def test_a_workload_that_counts_tokens_and_flops_reports_tokens_per_second_and_mfu(monkeypatch):
    """Tokens/s = samples/s x tokens per sample; MFU = samples/s x FLOPs per sample / the peak, for every
    evaluation and the whole run. A CPU has no peak, so MFU only with the user's AUTOSPEED_PEAK_TFLOPS."""
    counted = dataclasses.replace(load_workload("digits"), tokens_per_sample=64, train_flops_per_sample=2e6)
    monkeypatch.delenv(PEAK_ENV, raising=False)
    plain = train(Recipe(**RECIPE), counted)
    assert plain.tokens_per_second == pytest.approx(plain.samples_per_second * 64)
    assert plain.mfu is None  # a CPU: no known peak
    assert all(row["tokens_per_second"] > 0 and "mfu" not in row for row in plain.history)

    monkeypatch.setenv(PEAK_ENV, "0.5")  # 0.5 TFLOPS
    peaked = train(Recipe(**RECIPE), counted)
    assert peaked.mfu == pytest.approx(peaked.samples_per_second * 2e6 / 0.5e12)
    assert all(row["mfu"] == pytest.approx(row["samples_per_second"] * 2e6 / 0.5e12) for row in peaked.history)


def test_a_workload_that_counts_nothing_reports_neither(monkeypatch):
    monkeypatch.setenv(PEAK_ENV, "0.5")
    result = train(Recipe(**RECIPE), load_workload("digits"))
    assert result.tokens_per_second is None and result.mfu is None
    assert all("tokens_per_second" not in row and "mfu" not in row for row in result.history)


def test_mfu_is_per_device_whatever_the_workers(monkeypatch):
    """N workers' samples/s over one device's peak read N times too high (2 workers could pass 100%): MFU divides
    the run's throughput by its workers, each on a device of its own."""
    counted = dataclasses.replace(load_workload("digits"), train_flops_per_sample=1e12)
    monkeypatch.setenv(PEAK_ENV, "100")  # 100 TFLOPS
    cpu = torch.device("cpu")
    assert rates(80.0, counted, cpu)["mfu"] == pytest.approx(0.8)
    assert rates(160.0, counted, cpu, workers=2)["mfu"] == pytest.approx(0.8)  # twice the samples, two devices
