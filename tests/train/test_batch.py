"""The effective batch: micro-batch sizes to try and the scaled LR (batch.py)."""

from __future__ import annotations

import math

import pytest

from autospeed.recipe import Recipe
from autospeed.train.batch import as_trained, micro_batch_sizes, pin_micro_batch


@pytest.mark.parametrize("micro,batch_size,sizes", [
    (None, 128, [128]), (32, 128, [32]), (256, 128, [128]), ("auto", 96, [96, 48, 24, 12, 6, 3]),
])
def test_micro_batch_sizes_in_the_order_tried(micro, batch_size, sizes):
    assert micro_batch_sizes(Recipe(batch_size=batch_size, micro_batch_size=micro)) == sizes


@pytest.mark.parametrize("rule,factor", [("none", 1.0), ("linear", 4.0), ("sqrt", 2.0)])
def test_as_trained_keeps_the_effective_batch_and_scales_the_lr(rule, factor):
    scaling = {"rule": rule, "reference_batch": 128} if rule != "none" else {}
    r = Recipe(batch_size=256, accumulation_steps=2, lr=0.01, micro_batch_size="auto", lr_scaling=scaling)

    trained = as_trained(r, 64)

    assert (trained.batch_size, trained.accumulation_steps) == (64, 8)
    assert trained.lr == pytest.approx(0.01 * factor)
    assert math.isclose(as_trained(trained, 64).lr, trained.lr)  # resolved: scaling does not apply twice


def test_pin_micro_batch_records_the_micro_batch_that_fit():
    r = Recipe(batch_size=256, micro_batch_size="auto")
    assert pin_micro_batch(r, {"micro_batch_size": 64}).micro_batch_size == 64
    assert pin_micro_batch(Recipe(batch_size=256), {"micro_batch_size": 256}).micro_batch_size is None
