"""The `wsd` schedule (warmup-stable-decay, train/optimizers.py): warm-up ramp, the peak LR, and a linear fall to 0
over the last `decay_fraction` of the steps; before the decay the LR does not depend on the run's length."""

from __future__ import annotations

import pydantic
import pytest
import torch

from autospeed.recipe import Recipe
from autospeed.train.optimizers import build_schedule

PEAK_LR = 0.1


def lrs(recipe: Recipe, steps: int) -> tuple[list[float], float]:
    """The LR of every optimizer step of a `steps`-step run, and the LR after the last."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=recipe.lr)
    schedule = build_schedule(recipe, optimizer, steps)
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return seen, optimizer.param_groups[0]["lr"]


def test_wsd_ramps_up_holds_the_peak_then_falls_linearly_to_zero():
    seen, after = lrs(Recipe(schedule="wsd", lr=PEAK_LR, warmup_fraction=0.1, decay_fraction=0.2), 100)
    # the decay's 20 steps start from the peak (step 80) and reach 0 when the run ends (after step 99)
    warmup, stable, decay = seen[:10], seen[10:81], seen[80:]
    assert warmup[0] < 0.2 * PEAK_LR and all(a < b for a, b in zip(warmup, warmup[1:]))
    assert stable == pytest.approx([PEAK_LR] * 71)
    falling = decay + [after]
    steps_down = [a - b for a, b in zip(falling, falling[1:])]
    assert steps_down == pytest.approx([PEAK_LR / 20] * 20)  # linear: the same step every time, down to 0
    assert after == pytest.approx(0.0, abs=1e-12)


def test_wsd_without_warmup_starts_at_the_peak():
    seen, after = lrs(Recipe(schedule="wsd", lr=PEAK_LR, decay_fraction=0.5), 40)
    assert seen[:21] == pytest.approx([PEAK_LR] * 21)
    assert seen[21] < PEAK_LR and after == pytest.approx(0.0, abs=1e-12)


def test_before_its_decay_a_short_wsd_run_is_the_start_of_a_long_one():
    """What a trial needs: its LR up to its own decay is the long run's LR (no dependence on the length)."""
    short, _ = lrs(Recipe(schedule="wsd", lr=PEAK_LR, decay_fraction=0.2), 50)
    long, _ = lrs(Recipe(schedule="wsd", lr=PEAK_LR, decay_fraction=0.2), 500)
    assert short[:40] == pytest.approx(long[:40])


def test_warmup_and_decay_that_overlap_are_refused_naming_both():
    with pytest.raises(pydantic.ValidationError) as e:
        Recipe(schedule="wsd", warmup_fraction=0.5, decay_fraction=0.6)
    assert "warmup_fraction" in str(e.value) and "decay_fraction" in str(e.value)
    Recipe(schedule="wsd", warmup_fraction=0.4, decay_fraction=0.6)  # exactly 1 is fine
