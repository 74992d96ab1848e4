"""Workload option max_micro_batch: a simulated memory limit on any workload (workloads/_memory_limit.py)."""

from __future__ import annotations

import pytest
import torch

from autospeed.errors import UserError
from autospeed.workloads import load_workload


def test_a_training_pass_over_the_limit_runs_out_of_memory_and_evaluation_is_not_limited():
    workload = load_workload("mnist1d", {"max_micro_batch": 32})  # the default data, cached for the suite
    model = workload.build_model()
    x = workload.train_x[:33]

    model.train()
    model(x[:32])  # at the limit: fits
    with pytest.raises(torch.OutOfMemoryError, match="room for 32 .workload option max_micro_batch"):
        model(x)
    model.eval()
    with torch.no_grad():
        assert model(x).shape[0] == 33


@pytest.mark.parametrize("limit", [0, 2.5, True])
def test_a_limit_that_is_no_whole_number_of_samples_names_the_key(limit):
    with pytest.raises(UserError, match=r"workload_options.max_micro_batch: must be an int >= 1 .* got "):
        load_workload("mnist1d", {"max_micro_batch": limit})
