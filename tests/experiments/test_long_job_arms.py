"""experiments/_long_job_arms.py: successive halving spends exactly the flat arm's compute, keeps the recipe that
still leads at the longer horizons rather than the one that led first, and Ray's asynchronous rule lets a rung's
first trial through; the LR trend extrapolates a power law in the horizon."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import _long_job_arms as arms  # noqa: E402


@pytest.mark.parametrize(("eta", "sizes"), [(3, [12, 4, 2]), (2, [12, 6, 3, 2])])
def test_halving_spends_the_flat_arms_samples(eta, sizes):
    plan = arms.halving_plan(eta, 1000.0, 12)
    assert [n for _, n in plan] == sizes
    assert arms.spent(plan) == pytest.approx(12 * 1000.0)
    assert [h / plan[0][0] for h, _ in plan] == pytest.approx([eta ** k for k in range(len(sizes))])


def test_halving_picks_what_still_leads_later_not_what_led_first():
    """Trial 0 leads at the first rung and falls apart after it (a too-high LR); trial 1 is second at first and
    leads from the second rung on. The metric at one cut ranks 0 first; halving ranks 1 first."""
    plan = arms.halving_plan(3, 1000.0, 12)
    b = plan[0][0]

    def score(i: int, h: float) -> float:  # lower is better, as the censored objective
        if i == 0:
            return 1.0 if h <= b else 50.0
        return 2.0 + i if h <= b else 2.0 + i * (1.0 if i == 1 else 3.0)

    ranked, rungs = arms.halving_ranked(list(range(12)), plan, score)
    assert rungs[0][0] == 0  # it led at b
    assert ranked[0] == 1
    assert set(ranked[:2]) == set(rungs[-1]) and len(rungs[-1]) == 2
    assert sorted(ranked) == list(range(12))


def test_asha_lets_a_rungs_first_trial_through_and_stops_a_worse_one():
    plan = arms.halving_plan(3, 1000.0, 12)
    horizons = [h for h, _ in plan]
    ranked, spent = arms.asha_ranked([0, 1], plan, 3, lambda i, h: float(i))  # trial 1 worse at every rung
    assert ranked == [0, 1]
    assert spent == pytest.approx(horizons[-1] + horizons[0])  # 0 trained to max_t, 1 stopped at the first rung


def test_lr_trend_extrapolates_a_power_law_in_the_horizon():
    plan = arms.halving_plan(3, 1000.0, 12)
    lrs = {0: 0.4, 1: 0.2, 2: 0.1}  # the leader's LR halves per 3x horizon
    leaders, trend = arms.lr_trend([[0], [1], [2]], plan, lrs.__getitem__, plan[-1][0] * 9)
    assert leaders == [0.4, 0.2, 0.1]
    assert trend == pytest.approx(0.025)
    ranked = arms.trend_ranked([2, 1, 0, 3], [[2, 1, 0, 3], [1, 2]], {**lrs, 3: 0.025}.__getitem__, trend)
    assert ranked == [2, 1, 0, 3]  # the first rung's survivors by their distance to the trend, then the rest


def test_halving_from_the_cut_starts_at_the_flat_cut_and_keeps_two_past_it():
    """Rung 1 is the flat arm's cut for every trial; then 4, then 2, and 2 again while rungs are asked for; a rung
    never passes the recipes' end."""
    plan = arms.cut_plan(3, 1000.0, 12, 4, end_samples=1e9)
    assert plan == [(1000.0, 12), (3000.0, 4), (9000.0, 2), (27000.0, 2)]
    assert arms.spent(plan[:3]) == pytest.approx(32 * 1000.0)  # 12 + 4 x 2 + 2 x 6 cuts
    assert arms.cut_plan(3, 1000.0, 12, 4, end_samples=5000.0) == [(1000.0, 12), (3000.0, 4), (5000.0, 2)]


def test_asha_ranked_as_the_product_ranks_keeps_a_survivor_above_a_trial_that_led_at_the_cut():
    """Trial 0 continues past the cut (a rung's first trial always does) and reaches 0.945 at the last rung; trial 1
    led it at the cut (0.92 against 0.90) and stopped at 3c (0.925). By the censored objective (distance to the
    target at each trial's own last rung, as autospeed/track/runs.py ranks) the survivor still leads, as rung-first."""
    plan = arms.cut_plan(3, 1000.0, 3, 3, end_samples=1e9)
    accuracy = {0: {1000.0: 0.90, 3000.0: 0.93, 9000.0: 0.945}, 1: {1000.0: 0.92, 3000.0: 0.925, 9000.0: 0.95},
                2: {1000.0: 0.80, 3000.0: 0.99, 9000.0: 0.99}}

    def score(i: int, h: float) -> float:  # the censored objective at horizon h, target 0.96, none reached
        return h * (1 + (0.96 - accuracy[i][h]) / 0.96)

    assert arms.asha_rungs([0, 1, 2], [h for h, _ in plan], 3, score) == {0: 2, 1: 1, 2: 0}
    for by_rung in (True, False):
        ranked, spent = arms.asha_ranked([0, 1, 2], plan, 3, score, by_rung=by_rung)
        assert ranked == [0, 1, 2]
        assert spent == pytest.approx(9000.0 + 3000.0 + 1000.0)
