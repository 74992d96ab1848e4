"""The maths-neutrality check (search/neutrality.py) and the probe's use of it, with real torch training on digits.

Each check trains the baseline (digits' conv net, SGD, batch 32) for 120 steps at two seeds and once per knob
change at the first seed: a few seconds on 2 cores. A changed update presented as a systems knob (twice the
learning rate, label smoothing) must fall outside the two seeds' band; knobs that only change how a step runs
(the optimizer's foreach implementation, channels_last, a no-op on CPU) must fall inside it.
"""

from __future__ import annotations

import io
import json
import math

import pytest

from autospeed.recipe import Recipe
from autospeed.search import neutrality as n
from autospeed.search import probe as p
from autospeed.space import spec_from_dict

BASELINE = {"batch_size": 32, "optimizer": "sgd", "lr": 0.02, "schedule": "constant", "precision": "fp32",
            "compile": "none"}
STEPS, WINDOW_STEPS = 120, 20
MATHS = [{"lr": 0.04}, {"label_smoothing": 0.1}]
NEUTRAL = [{"optimizer_impl": "foreach"}, {"channels_last": True}]


@pytest.fixture(scope="module")
def checked() -> dict[str, n.Neutrality]:
    from autospeed.workloads import load_workload

    workload = load_workload("digits")
    baseline = Recipe(workload="digits", target_accuracy=0.95, seed=0, **BASELINE)
    found = n.check(baseline, MATHS + NEUTRAL, workload, steps=STEPS, window_steps=WINDOW_STEPS, band_fraction=1.0,
                    train_samples=len(workload.train_x), threads=2)
    return {c.label: c for c in found}


def test_a_changed_update_presented_as_a_systems_knob_is_a_maths_knob(checked):
    for label in ("lr=0.04", "label_smoothing=0.1"):
        c = checked[label]
        assert not c.neutral, c.line()
        assert c.distance > c.band > 0
        assert "a MATHS knob: not fixed as if it were free" in c.line()


def test_a_knob_that_changes_only_how_a_step_runs_is_neutral(checked):
    for label in ("optimizer_impl=foreach", "channels_last=True"):
        c = checked[label]
        assert c.neutral, c.line()
        # same seed and data order: rounding at most, far inside the band a new seed spans
        assert c.distance < 0.1 * c.band


def test_the_distance_is_zero_for_one_trace_and_infinite_for_a_diverged_one():
    assert n.distance([2.0, 1.5, 1.0], [2.0, 1.5, 1.0]) == 0.0
    assert n.distance([2.0, 1.0], [2.0, 2.0]) == pytest.approx(math.log(2) / math.sqrt(2))
    assert n.distance([2.0, float("nan")], [2.0, 1.0]) == math.inf
    assert n.distance([], []) == math.inf


def test_a_neutral_configurations_tta_is_the_default_over_its_speed_with_the_noise_as_interval():
    assert n.predicted_tta_ratio(1.25, 0.05) == pytest.approx((0.8, 1 / (1.25 * 1.05), 1.05 / 1.25))


SPACE = {"name": "neutral", "workload": "digits", "target_accuracy": 0.95, "budget": {"max_train_seconds": 30},
         "probe": {"rounds": 2, "neutrality": {"enabled": True, "steps": STEPS, "window_steps": WINDOW_STEPS}},
         "baseline": BASELINE, "fixed": {"epochs": 10},
         "space": {"optimizer_impl": {"choice": ["default", "foreach"]}, "lr": {"loguniform": [0.01, 0.1]}}}


def timed(speeds: dict[str, float]):
    """A measure of given timings (no training): the probe's decision, not the machine, is under test."""
    def measure(config: dict, round_: int) -> list[p.Probe]:
        return [p.Probe(config, 32, p.OK, speeds[json.dumps(config, sort_keys=True)], 0.0, round=round_)]
    return measure


def test_the_probe_fixes_a_faster_knob_only_after_its_real_check_finds_it_neutral(dataset_cache):
    """The check itself runs (in this process, on digits); the timings are given: foreach 1.25x the default."""
    spec = spec_from_dict(SPACE, "neutral.yaml")
    out = io.StringIO()
    decision = p.probe_stage(spec, timed({'{"optimizer_impl": "default"}': 100.0,
                                          '{"optimizer_impl": "foreach"}': 125.0}), out)
    assert decision.fixed == {"optimizer_impl": "foreach"} and decision.maths_knobs == []
    text = out.getvalue()
    assert "  neutrality: optimizer_impl=foreach: neutral (loss trace 0.0000 from the baseline's" in text
    assert text.splitlines()[-1].endswith("maths-neutral, so its TTA is predicted at ~0.80x the default's "
                                          "[0.80-0.80] (throughput ratio and its noise; no curve extrapolated)")
    record = decision.neutrality_record()
    assert record["checks"]["optimizer_impl=foreach"]["neutral"] is True
    assert record["predicted_tta_ratio"] == {"ratio": 0.8, "low": 0.8, "high": 0.8}


def test_a_faster_knob_that_fails_the_check_is_not_fixed_and_stays_searched_by_the_trials():
    """A knob the check finds changing the maths (given here: the check's own verdict is tested above) is not
    eligible however fast it is, and the trials keep searching it."""
    spec = spec_from_dict(SPACE, "neutral.yaml")
    out = io.StringIO()

    def check(base: dict, changes: list[dict]) -> list[n.Neutrality]:
        return [n.Neutrality(change, 0.5, 0.1, 1.0, STEPS) for change in changes]

    decision = p.probe_stage(spec, timed({'{"optimizer_impl": "default"}': 100.0,
                                          '{"optimizer_impl": "foreach"}': 200.0}), out, check)
    assert decision.fixed == {"optimizer_impl": "default"} and decision.maths_knobs == ["optimizer_impl"]
    assert decision.spec.space["optimizer_impl"].choice == ["default", "foreach"]  # still the trials' to search
    text = out.getvalue()
    assert "  probe 1: 2.00x the default (noise 0.0%); not eligible: it changes the maths (neutrality check)" in text
    assert "left to the trials, maths knobs here: optimizer_impl" in text.splitlines()[-1]
    assert decision.predicted_tta_ratio() is None


def test_a_baseline_that_differs_from_itself_at_one_seed_leaves_every_change_unchecked_saying_why():
    """compare() over given traces (the traces' training is tested above, and through a script in
    tests/script/test_script_probe.py): the baseline's repeat at seed 0 differs by 0.77 of the band between two
    seeds, more than REPEAT_LIMIT of the limit, so its data order does not follow the seed; the change is not
    trained, and says so."""
    traces = iter([[2.0, 1.0], [2.0, 1.2], [2.0, 1.15], [2.0, 1.0]])  # seed 0, seed 1, seed 0 again; the change
    seeds = []

    def trace(recipe: Recipe):
        seeds.append(recipe.seed)
        return next(traces), None

    base = Recipe(workload="digits", target_accuracy=0.95, seed=0, **BASELINE)
    [c] = n.compare(base, [{"optimizer_impl": "foreach"}], trace, steps=STEPS, band_fraction=1.0, repeat=True)
    assert seeds == [0, 1, 0]
    assert not c.neutral
    assert c.line().startswith("  neutrality: optimizer_impl=foreach: not checked (two runs at seed 0 differ by "
                               "0.0988, 0.77 of the band between two seeds"), c.line()
