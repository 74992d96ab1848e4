"""experiments/_long_job_plateau.py: a curve that flattens towards a floor is projected to its crossing by the
plateau fits and too early by the power laws, a floor at or above the target gives no prediction, a winner that
reached is measured, and the interval's seed spread leaves the winner's recipe out."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import _long_job_plateau as plateau  # noqa: E402


def floored_row(floor: float = 0.02, scale: float = 0.5, rung: int = 2000) -> dict:
    """A trial row whose error is floor + scale x (samples / 100) ** -1, evaluated every 100 samples to `rung`."""
    curve = [[s, 1 - floor - scale * (s / 100) ** -1, s / 1000] for s in range(100, rung + 1, 100)]
    return {"curve": curve, "epochs": 30.0, "schedule": "constant", "decay_fraction": 0.0}


def test_a_flattening_curve_is_projected_to_its_crossing_by_the_plateau_and_too_early_by_power_laws():
    # error 0.03 (accuracy 0.97): 0.02 + 0.5 x 100 / s = 0.03 at s = 5000
    out = plateau.projections(floored_row(), [floored_row()], 2000, 2000 / 3, 0.97)
    assert out["plateau, own"] == pytest.approx(5000, rel=0.02)
    assert out["plateau, shared floor"] == pytest.approx(5000, rel=0.02)
    assert out["power law since the cut"] < 0.8 * 5000  # bent curves cross later than a line in log-log says
    assert out["slope between rungs"] < 0.8 * 5000


def test_a_floor_at_the_target_gives_no_prediction_and_a_reached_winner_is_measured():
    band = (-0.2, 0.3)
    out = plateau.predict_all(floored_row(floor=0.04), [], 2000, None, 0.965, cap=1e6, band=band)
    assert out["plateau, own"] is None  # its floor (0.04) never meets the target error 0.035
    mid, low, high = plateau.predict_all(floored_row(), [], 2000, None, 0.97, cap=1e6, band=band)["plateau, own"]
    assert (low / mid, high / mid) == pytest.approx((math.exp(-0.2), math.exp(0.3)), rel=1e-9)
    # accuracy 0.9 first at 1 - 0.02 - 50 / s >= 0.9: s = 625, the first evaluation at or past it is 700
    assert plateau.predict_all(floored_row(), [], 2000, None, 0.9, cap=1e6, band=band) == \
        dict.fromkeys(plateau.PREDICTORS, (700, 700, 700))


def test_the_seed_band_leaves_the_winners_recipe_out():
    per_seed = np.array([[100.0, 100.0, 400.0, 400.0], [100.0, 110.0, 120.0, 110.0], [90.0, 100.0, 110.0, 100.0],
                         [1.0, math.inf, 2.0, 1.0]])
    with_spread = plateau.seed_band(per_seed, 1)  # recipe 0's seeds land 2x either side of its median
    without = plateau.seed_band(per_seed, 0)  # recipe 0 left out; recipe 3 never has every seed reach
    assert with_spread[1] > 0.5 and without[1] < 0.2 and with_spread[0] == -with_spread[1]
    assert plateau.seed_band(per_seed[:1], 0) == (0.0, 0.0)


def test_the_moved_target_check_projects_the_same_fit_to_each_moved_targets_truth():
    import _long_job_predict as prediction

    def crossing(t: float) -> float:  # 0.02 + 50 / s = 1 - t
        return 50 / (1 - t - 0.02)

    picks = [{"recipe": 0, "seed": 0, "rung": 2000, "truth": crossing(0.97)}]
    by = prediction.moved(picks, lambda s, i, h: floored_row(), 0.97, 1e6,
                          lambda t: np.array([[crossing(t)] * 3, [1.0, 1.0, 1.0]]))
    assert sorted(by) == sorted(plateau.SHIFTS)
    assert all(c["reach"] == 1 and c["error"] < 0.02 for c in by.values())  # 2500 samples at 0.96 ... 10000 at 0.975
