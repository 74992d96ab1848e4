"""The best lr / batch size at each ASHA rung and their trend to the job's length (autospeed/search/rung_trend.py):
what a search prints after confirmation, a prediction said to be one."""

import math

import pytest

from autospeed.search.rung_trend import Trial, rungs_of, trend


def _trial(name, lr, curve, tta=None, batch=128, optimizer="sgd"):
    return Trial(name, {"lr": str(lr), "batch_size": str(batch), "optimizer": optimizer}, curve, tta)


def test_rungs_are_ashas_milestones_up_to_the_trials_budget():
    assert rungs_of(0.7, 3, 6.3) == pytest.approx([0.7, 2.1, 6.3])
    assert rungs_of(1, 2, 5) == [1, 2, 4]


def test_each_rungs_leader_gives_the_knob_there_and_the_line_through_them_is_extrapolated_to_the_job():
    trials = [_trial("a", 0.4, [(1, 0.80), (3, 0.85), (9, 0.88)]),
              _trial("b", 0.2, [(1, 0.70), (3, 0.87), (9, 0.93)]),
              _trial("c", 0.1, [(1, 0.60), (3, 0.80), (9, 0.95)]),
              _trial("d", 0.05, [(1, 0.50)])]  # stopped at the first rung: not at the later ones
    found = trend(trials, [1, 3, 9], "max", ["lr", "batch_size"], job_seconds=27, job_what="the winner's TTA")
    assert [(r["seconds"], r["trials"], r["leader"], r["lr"]) for r in found.rungs] == \
        [(1, 4, "a", 0.4), (3, 3, "b", 0.2), (9, 3, "c", 0.1)]
    assert found.knobs["lr"]["slope"] == pytest.approx(math.log(0.5) / math.log(3))
    assert found.knobs["lr"]["at_job"] == pytest.approx(0.05)  # halved per 3x, once more from 9 s to 27 s
    assert found.knobs["batch_size"] == {"slope": 0.0, "over": 3, "at_job": None}  # one value at every rung
    text = "\n".join(found.lines())
    assert "lr: short trials preferred 0.4 at 1 s, 0.2 at 3 s, 0.1 at 9 s" in text
    assert "at the job's length, 27.00 s (the winner's TTA), the trend says ~0.05 (a prediction from 3 rungs, " \
           "not measured)" in text
    assert "batch_size: 128 at every rung (no trend)" in text


def test_a_trial_that_reached_the_target_leads_every_rung_past_its_tta():
    trials = [_trial("fast", 0.3, [(1, 0.60), (2, 0.96)], tta=2.0),
              _trial("slow", 0.1, [(1, 0.70), (3, 0.90), (9, 0.94)]),
              _trial("other", 0.2, [(1, 0.65), (3, 0.88), (9, 0.93)])]
    found = trend(trials, [1, 3, 9], "max", ["lr"])
    assert [r["leader"] for r in found.rungs] == ["slow", "fast", "fast"]
    assert found.knobs["lr"]["at_job"] is None  # no job length known: the rungs' values only
    assert "the trend says" not in "\n".join(found.lines())


def test_a_loss_is_led_by_its_lowest_value():
    trials = [_trial("a", 0.4, [(1, 2.0), (3, 1.5)]), _trial("b", 0.1, [(1, 2.5), (3, 1.2)])]
    assert [r["leader"] for r in trend(trials, [1, 3], "min", ["lr"]).rungs] == ["a", "b"]


def test_the_lr_is_compared_within_the_last_leaders_optimizer():
    trials = [_trial("adam", 0.001, [(1, 0.90), (3, 0.91)], optimizer="adamw"),
              _trial("sgd-hi", 0.4, [(1, 0.80), (3, 0.85)]),
              _trial("sgd-lo", 0.1, [(1, 0.70), (3, 0.95)])]
    found = trend(trials, [1, 3], "max", ["lr"], job_seconds=9, job_what="x")
    assert found.optimizer == "sgd"
    assert [r["lr"] for r in found.rungs] == [0.4, 0.1]  # not adamw's 0.001, which led the first rung
    assert "lr (sgd trials): short trials preferred" in "\n".join(found.lines())


def test_no_trend_from_fewer_than_two_rungs_where_trials_were_compared():
    trials = [_trial("a", 0.4, [(1, 0.80), (3, 0.85)]), _trial("b", 0.2, [(1, 0.70)])]
    assert trend(trials, [1, 3], "max", ["lr"]) is None  # at 3 s only "a" trained: nothing compared
