"""Cooldown branches (autospeed/train/cooldown.py): a wsd trial measures what its run would reach had its LR decayed
at that point, and its own run goes on exactly as it would have without the branch."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from autospeed.recipe import Recipe
from autospeed.train.cooldown import Cooldown
from autospeed.train.trainer import train
from autospeed.workloads import load_workload

# digits: 1347 training samples, 42 steps of 32 an epoch; an evaluation every 21 steps (21, 42, 63, 84); the wsd
# decay takes the last 25 steps, from step 59: evaluations 21 and 42 are in the stable phase, and the second epoch
# draws a new order (which a branch must not have drawn from)
WSD = dict(workload="digits", target_accuracy=1.0, max_train_seconds=120, epochs=2, eval_every_epochs=0.5,
           batch_size=32, optimizer="adamw", lr=0.003, seed=0, schedule="wsd", decay_fraction=0.3)


@pytest.fixture(scope="module")
def noisy_digits():
    """digits whose training draws on torch's global RNG twice a step (a noise augmentation and dropout), and that
    keeps every model it builds, so a test can read the trained weights."""
    digits = load_workload("digits")
    built: list[nn.Module] = []

    def build():
        built.append(nn.Sequential(digits.build_model(), nn.Dropout(0.2)))
        return built[-1]

    workload = dataclasses.replace(digits, build_model=build, augment=lambda x: x + 0.05 * torch.randn_like(x))
    return workload, built


@pytest.mark.parametrize("data_loader", ["device", "dataloader"])
def test_a_branch_leaves_the_trial_s_own_run_untouched(noisy_digits, data_loader):
    """With a branch at every stable-phase evaluation (half the steps so far each), the run's curve and its final
    weights are bit for bit those of the run without: weights, optimizer state, LR schedule, RNG and data order were
    all restored. The branches measured something of their own (not the run's values)."""
    workload, built = noisy_digits
    plain = train(Recipe(**WSD, data_loader=data_loader), workload)
    plain_weights = [p.detach().clone() for p in built[-1].parameters()]
    branched = train(Recipe(**WSD, data_loader=data_loader), workload, cooldown=Cooldown(0.5, each_evaluation=True))
    assert branched.status == plain.status == "not_reached", branched.error

    for key in ("step", "val_loss", "val_accuracy", "train_loss"):
        assert [h[key] for h in branched.history] == [h[key] for h in plain.history], key
    for a, b in zip(built[-1].parameters(), plain_weights):
        assert torch.equal(a, b)

    branches = [h for h in branched.history if "cooldown_val_loss" in h]
    assert [(h["step"], h["cooldown_steps"]) for h in branches] == [(21, 10), (42, 21)]  # none in the decay
    assert all(h["cooldown_val_loss"] != h["val_loss"] and h["cooldown_seconds"] > 0 for h in branches)
    assert branched.cooldown_seconds == pytest.approx(sum(h["cooldown_seconds"] for h in branches))
    assert plain.cooldown_seconds == 0 and "cooldown_failed" not in branched.applied


def test_a_trial_cut_by_its_budget_branches_at_its_last_evaluation_off_the_train_clock():
    """By default a trial branches once, at the evaluation its budget ends it on (the cut): 20% of its steps so
    far, not on the train clock (the run stopped at its budget), in its wall seconds."""
    result = train(Recipe(**{**WSD, "epochs": 1000, "max_train_seconds": 0.3}), cooldown=Cooldown(0.2))
    assert result.status == "not_reached" and result.epochs_done < 1000
    *before, cut = result.history
    assert not any("cooldown_val_accuracy" in h for h in before)
    assert cut["cooldown_steps"] == max(1, round(0.2 * cut["step"])) and 0 <= cut["cooldown_val_accuracy"] <= 1
    assert result.wall_seconds >= result.train_seconds + result.cooldown_seconds
    assert result.cooldown_seconds == cut["cooldown_seconds"] > 0


def test_a_branch_that_fails_leaves_the_run_as_it_was_and_says_why():
    """A branch whose second step raises (its first already moved the weights and the optimizer state): the run's
    weights and AdamW state are back as before it, and the branch hands back the error's line, not a measurement."""
    from autospeed.train.cooldown import branch
    from autospeed.train.step import Stepper

    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    stepper = Stepper(Recipe(), torch.device("cpu"), {}, 1)
    x = torch.randn(8, 4)
    stepper.backward(model(x).square().mean())
    stepper.step([optimizer])  # the run's one step: AdamW has state
    weights = [p.detach().clone() for p in model.parameters()]
    state = [v.clone() for s in optimizer.state.values() for v in s.values()]
    calls = []

    def backward(batch):
        calls.append(batch)
        if len(calls) == 2:
            raise RuntimeError("out of something\nsecond line")
        loss = model(batch).square().mean()
        stepper.backward(loss)
        return loss

    out = branch(Cooldown(1.0), 4, model=model, optimizers=[optimizer], stepper=stepper,
                 micro_batches=iter([x] * 4), backward=backward, evaluate=dict, device=torch.device("cpu"))
    assert out == "RuntimeError: out of something"
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), weights))
    assert all(torch.equal(a, b) for a, b in zip((v for s in optimizer.state.values() for v in s.values()), state))
    assert optimizer.param_groups[0]["lr"] == 0.1
