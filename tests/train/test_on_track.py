"""The production run checked against its exported prediction (autospeed/train/on_track.py): pace at 10%, 25% and
50% of the predicted TTA, one line each, and the measured TTA against the prediction at the end. Live curves here
are lists of evaluations; tests/train/test_train_on_track.py runs `autospeed train` itself."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autospeed.recipe import Trajectory
from autospeed.train.on_track import AHEAD, BEHIND, ON_TRACK, OnTrack

# an accuracy curve reaching the target 0.9 at 10 s, evaluated every second
CURVE = [(float(s), v) for s, v in zip(range(1, 11), (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.84, 0.86, 0.88, 0.9))]


def trajectory(low: float | None = None, high: float | None = None) -> Trajectory:
    return Trajectory(source="confirmation", note="test", metric="val_accuracy", mode="max", tta_seconds=10.0,
                      tta_low_seconds=low, tta_high_seconds=high, points=CURVE)


def live(checker: OnTrack, slower: float, until: float = 0.9) -> float | None:
    """Feed the curve with every time `slower` times as long, to `until`; the TTA if it got there."""
    best = None
    for seconds, value in CURVE:
        best = value if best is None else max(best, value)
        checker.update(SimpleNamespace(train_seconds=seconds * slower, best_value=best))
        if best >= until:
            return seconds * slower
    return None


@pytest.mark.parametrize("slower,verdict", [(1.0, ON_TRACK), (1.05, ON_TRACK), (2.0, BEHIND), (0.5, AHEAD)])
def test_each_checkpoint_and_the_end_say_on_track_behind_or_ahead_with_the_pace(slower, verdict):
    lines: list[str] = []
    checker = OnTrack(trajectory(), say=lines.append)
    tta = live(checker, slower)
    record = checker.finish(tta, tta)
    assert [c.fraction for c in checker.checks] == [0.1, 0.25, 0.5]
    for c in checker.checks:
        assert c.pace == pytest.approx(slower) and c.verdict == verdict
    assert len(lines) == 4 and all(verdict in line for line in lines)
    assert lines[1].startswith("prediction check at 25% of the predicted TTA ~10 s (2.50 s): val_accuracy ")
    assert f"pace {slower:.2f}x, {verdict}" in lines[1]
    assert lines[-1].startswith(f"measured TTA {10 * slower:.2f} s against the predicted ~10 s")
    assert record["tta_over_prediction"] == pytest.approx(slower) and record["verdict"] == verdict


def test_the_prediction_range_widens_on_track_never_below_ten_percent():
    assert OnTrack(trajectory(9.8, 10.1)).band == pytest.approx((0.9, 1.1))
    wide = OnTrack(trajectory(6.0, 15.0), say=lambda line: None)
    assert wide.band == pytest.approx((0.6, 1.5))
    live(wide, 1.4)
    assert {c.verdict for c in wide.checks} == {ON_TRACK}


def test_a_run_that_ends_before_a_checkpoint_is_checked_at_its_end():
    lines: list[str] = []
    checker = OnTrack(trajectory(), say=lines.append)
    tta = live(checker, 0.2)  # reached at 2 s: the 50% checkpoint (5 s) never came
    checker.finish(tta, tta)
    last = checker.checks[-1]
    assert last.ended_before and last.verdict == AHEAD
    assert "the run ended at 2.00 s, before it, with val_accuracy 0.9" in lines[2]
    slow = OnTrack(trajectory(), say=lines.append)
    live(slow, 3.0, until=0.5)  # stopped (its budget) at 6 s, at 0.5
    record = slow.finish(None, 6.0)
    assert [c.verdict for c in slow.checks] == [BEHIND, BEHIND, BEHIND] and record["verdict"] == "not reached"
    assert record["measured_tta_seconds"] is None and "target not reached in 6.00 s" in lines[-1]


def test_a_loss_curve_is_compared_in_its_own_direction():
    loss = Trajectory(source="prediction", note="test", metric="val_loss", mode="min", tta_seconds=4.0,
                      tta_low_seconds=3.0, tta_high_seconds=6.0, points=[(1.0, 3.0), (2.0, 2.0), (4.0, 1.5)])
    checker = OnTrack(loss, say=lambda line: None)
    assert checker.expected_seconds(2.5) == pytest.approx(1.5) and checker.expected_seconds(1.0) == 4.0
    checker.update(SimpleNamespace(train_seconds=2.0, best_value=2.5))  # 1.33x the predicted time to 2.5
    assert checker.checks[0].pace == pytest.approx(2.0 / 1.5) and checker.checks[0].verdict == ON_TRACK


@pytest.mark.parametrize("samples_factor,rate_factor", [(1.0, 0.5), (2.0, 1.0), (1.5, 0.75)])
def test_a_miss_splits_into_samples_to_target_and_throughput(samples_factor, rate_factor):
    """TTA = samples to target / samples per second: a run that needs `samples_factor` x the prediction's samples at
    `rate_factor` x its throughput takes samples_factor / rate_factor x its TTA, and the end says which half did it."""
    lines: list[str] = []
    predicted = Trajectory(source="confirmation", note="test", metric="val_accuracy", mode="max", tta_seconds=10.0,
                           points=CURVE, samples_per_second=1000.0)
    checker = OnTrack(predicted, say=lines.append)
    slower = samples_factor / rate_factor
    for seconds, value in CURVE:  # the curve's samples: samples_factor x the prediction's at each point
        checker.update(SimpleNamespace(train_seconds=seconds * slower, best_value=value,
                                       samples=round(seconds * 1000 * samples_factor)))
    record = checker.finish(10.0 * slower, 10.0 * slower)
    assert record["tta_over_prediction"] == pytest.approx(slower)
    assert record["samples_over_prediction"] == pytest.approx(samples_factor)
    assert record["throughput_over_prediction"] == pytest.approx(rate_factor)
    assert record["samples_to_target"] == round(10_000 * samples_factor)
    assert lines[-1] == (f"  = samples to target {10_000 * samples_factor:,.0f} against ~10,000 "
                         f"({samples_factor:.2f}x: the maths, this seed and data order) / throughput "
                         f"{1000 * rate_factor:,.0f} samples/s "
                         f"against 1,000 ({rate_factor:.2f}x: the systems, this machine and its load)")


def test_no_split_without_a_throughput_or_without_samples():
    for with_rate, samples in ((False, 10_000), (True, 0)):
        lines: list[str] = []
        checker = OnTrack(Trajectory(source="trial", note="test", metric="val_accuracy", mode="max",
                                     tta_seconds=10.0, points=CURVE, samples_per_second=1000.0 if with_rate else None),
                          say=lines.append)
        for seconds, value in CURVE:
            checker.update(SimpleNamespace(train_seconds=seconds, best_value=value, samples=samples))
        record = checker.finish(10.0, 10.0)
        assert "samples_over_prediction" not in record and lines[-1].startswith("measured TTA")


def test_each_checkpoint_says_which_half_its_pace_comes_from():
    """At 10% of a long job: 2x behind at half the throughput and the same samples is the machine, not the recipe."""
    lines: list[str] = []
    checker = OnTrack(Trajectory(source="confirmation", note="test", metric="val_accuracy", mode="max",
                                 tta_seconds=10.0, points=CURVE, samples_per_second=1000.0), say=lines.append)
    best = None
    for seconds, value in CURVE:  # the prediction's samples at each value, trained at half its throughput
        best = value if best is None else max(best, value)
        checker.update(SimpleNamespace(train_seconds=2 * seconds, best_value=best, samples=round(1000 * seconds)))
    first = checker.checks[0]
    assert first.pace == pytest.approx(2.0) and first.verdict == BEHIND
    assert (first.samples_over_prediction, first.throughput_over_prediction) == pytest.approx((1.0, 0.5))
    assert lines[0].endswith("; samples 1.00x, throughput 0.50x the prediction's")
