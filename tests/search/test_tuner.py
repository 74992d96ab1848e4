"""The Tune set-up (search/tuner.py): TPE over the space, ASHA that keeps the baseline, the stopper."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autospeed.space import spec_from_dict

SMOKE = Path(__file__).resolve().parents[2] / "search_spaces" / "smoke.yaml"


def _spec(**overrides):
    data = yaml.safe_load(SMOKE.read_text())
    data.update(overrides)
    return spec_from_dict(data, "space.yaml")


def test_tpe_models_the_knobs_jointly_after_the_baseline_trial(tmp_path):
    """The baseline is study trial 0 and samples no parameters; TPE must still model
    every knob jointly (multivariate) instead of each one on its own."""
    import optuna

    from autospeed.search.tuner import make_sampler

    spec = _spec(space={"batch_size": {"choice": [32, 64, 128]}, "lr": {"loguniform": [0.001, 0.3]},
                        "schedule": {"choice": ["constant", "cosine"]}})
    sampler = make_sampler(spec, concurrent=1, seed=0)
    study = optuna.create_study(sampler=sampler)
    for i in range(spec.sampler.n_startup_trials + 3):
        trial = study.ask()
        spec.define_by_run(trial)
        study.tell(trial, 5.0 if i == 0 else float(i))
    trial = study.ask()
    assert set(sampler.infer_relative_search_space(study, trial)) >= {"batch_size", "lr", "schedule"}


class _Trial:
    def __init__(self, trial_id: str, baseline: bool):
        self.trial_id, self.config = trial_id, {"baseline": baseline}


def test_asha_stops_a_weak_trial_at_a_rung_but_never_the_baseline():
    from ray.tune.schedulers import TrialScheduler

    from autospeed.search.tuner import make_scheduler

    spec = _spec(budget={"trials": 4, "max_train_seconds": 10}, asha={"grace_seconds": 1, "reduction_factor": 2})
    asha = make_scheduler(spec)
    strong, weak, base = _Trial("strong", False), _Trial("weak", False), _Trial("base", True)
    for trial in (strong, weak, base):
        asha.on_trial_add(None, trial)
    assert asha.on_trial_result(None, strong, {"train_seconds": 1.0, "val_accuracy": 0.9}) == TrialScheduler.CONTINUE
    one_worker = {"train_seconds": 1.0, "val_accuracy": 0.1, "workers": 1}
    assert asha.on_trial_result(None, weak, one_worker) == TrialScheduler.STOP
    assert asha.on_trial_result(None, base, {"train_seconds": 1.0, "val_accuracy": 0.05}) == TrialScheduler.CONTINUE
    # past the trials' budget (ASHA's max_t) only the baseline goes on, to its own budget
    assert asha.on_trial_result(None, base, {"train_seconds": 12.0, "val_accuracy": 0.5}) == TrialScheduler.CONTINUE
    assert asha.on_trial_result(None, strong, {"train_seconds": 12.0, "val_accuracy": 0.99}) == TrialScheduler.STOP


def test_asha_stops_a_data_parallel_trial_through_its_stop_file_and_counts_only_the_report_it_stopped_on(tmp_path):
    """A trial whose reports name a stop file drives Ray Train workers: ASHA's stop creates the file (its workers
    end the run at their next evaluation) instead of having Tune end the trial's actor, which would leave the
    workers' cores held. The reports it sends meanwhile, and its final one, do not enter the rungs: a weak
    stopped trial's later values would lower the bar there. The incumbent cap stops it the same way; a
    data-parallel baseline is never stopped."""
    from ray.tune.schedulers import TrialScheduler

    from autospeed.search.tuner import make_scheduler

    spec = _spec(budget={"trials": 6, "max_train_seconds": 10}, asha={"grace_seconds": 1, "reduction_factor": 2})
    asha = make_scheduler(spec)  # rungs at 1, 2, 4 and 8 s
    strong, weak, mid, later, base = (_Trial(n, n == "base") for n in ("strong", "weak", "mid", "later", "base"))
    for trial in (strong, weak, mid, later, base):
        asha.on_trial_add(None, trial)

    def report(name: str, seconds: float, accuracy: float) -> dict:
        return {"train_seconds": seconds, "val_accuracy": accuracy, "workers": 2,
                "stop_file": str(tmp_path / "stop_requests" / name)}

    asha.on_trial_result(None, strong, {"train_seconds": 1.0, "val_accuracy": 0.9})
    asha.on_trial_result(None, strong, {"train_seconds": 2.0, "val_accuracy": 0.95})
    assert asha.on_trial_result(None, weak, report("weak", 1.0, 0.1)) == TrialScheduler.CONTINUE
    assert (tmp_path / "stop_requests" / "weak").exists()  # what its workers read at every evaluation
    # its workers' next evaluation, past the 2 s rung, before they read the file: not counted
    assert asha.on_trial_result(None, weak, report("weak", 2.1, 0.12)) == TrialScheduler.CONTINUE
    asha.on_trial_result(None, mid, {"train_seconds": 1.0, "val_accuracy": 0.9})
    # with weak's 0.12 in the 2 s rung its bar would be ~0.5, and 0.6 would go on
    assert asha.on_trial_result(None, mid, {"train_seconds": 2.0, "val_accuracy": 0.6}) == TrialScheduler.STOP
    asha.on_trial_complete(None, weak, {**report("weak", 2.1, 0.12), "final": True})  # ended on its own
    asha.on_trial_result(None, later, {"train_seconds": 1.0, "val_accuracy": 0.9})
    assert asha.on_trial_result(None, later, {"train_seconds": 2.0, "val_accuracy": 0.6}) == TrialScheduler.STOP

    assert asha.on_trial_result(None, base, report("base", 1.0, 0.05)) == TrialScheduler.CONTINUE
    assert not (tmp_path / "stop_requests" / "base").exists()

    capped = make_scheduler(_spec(budget={"trials": 6, "max_train_seconds": 30}, confirm={"top_k": 1, "repeats": 2},
                                  asha={"grace_seconds": 10, "reduction_factor": 2}))  # no rung before 10 s
    fast, slow = _Trial("fast", False), _Trial("slow", False)
    for trial in (fast, slow):
        capped.on_trial_add(None, trial)
    capped.on_trial_result(None, fast, {"train_seconds": 2.0, "val_accuracy": 0.95})
    assert capped.on_trial_result(None, slow, report("slow", 2.5, 0.5)) == TrialScheduler.CONTINUE
    assert not (tmp_path / "stop_requests" / "slow").exists()
    assert capped.on_trial_result(None, slow, report("slow", 3.5, 0.6)) == TrialScheduler.CONTINUE  # past 1.5 x 2 s
    assert (tmp_path / "stop_requests" / "slow").exists()


def test_asha_stops_a_trial_that_can_no_longer_be_among_the_confirmed_once_it_passes_the_incumbents_tta():
    """With top_k = 2 reached at 2 s and 4 s, a trial still short of the target at 1.5 x 4 s cannot be among the
    two recipes confirmation re-runs: stopped, though ASHA's rungs would let it go on. Before two have reached,
    for the baseline, and with `asha.incumbent_margin: null`, nothing is capped."""
    from ray.tune.schedulers import TrialScheduler

    from autospeed.search.tuner import make_scheduler

    asha_on = {"grace_seconds": 10, "reduction_factor": 2}
    spec = _spec(budget={"trials": 6, "max_train_seconds": 30}, asha=asha_on, confirm={"top_k": 2, "repeats": 2})
    asha = make_scheduler(spec)  # first rung at 10 s: the rungs never stop anything here
    fast, second, slow, base = (_Trial(n, n == "base") for n in ("fast", "second", "slow", "base"))
    for trial in (fast, second, slow, base):
        asha.on_trial_add(None, trial)
    assert asha.on_trial_result(None, fast, {"train_seconds": 2.0, "val_accuracy": 0.95}) == TrialScheduler.CONTINUE
    assert asha.tta_cap() is None  # one reached: the second confirmed recipe is still open
    again = _Trial("again", False)  # the sampler proposed fast's recipe again: its result handed back, not a TTA
    asha.on_trial_add(None, again)
    asha.on_trial_result(None, again, {"train_seconds": 0.0, "val_accuracy": 0.95, "duplicate_of": "fast"})
    assert asha.tta_cap() is None
    assert asha.on_trial_result(None, slow, {"train_seconds": 7.0, "val_accuracy": 0.5}) == TrialScheduler.CONTINUE
    asha.on_trial_result(None, second, {"train_seconds": 4.0, "val_accuracy": 0.95})
    assert asha.tta_cap() == 1.5 * 4.0  # the default incumbent_margin
    assert asha.on_trial_result(None, slow, {"train_seconds": 5.5, "val_accuracy": 0.6}) == TrialScheduler.CONTINUE
    assert asha.on_trial_result(None, slow, {"train_seconds": 6.5, "val_accuracy": 0.7}) == TrialScheduler.STOP
    assert asha.on_trial_result(None, base, {"train_seconds": 20.0, "val_accuracy": 0.7}) == TrialScheduler.CONTINUE

    off = make_scheduler(_spec(budget={"trials": 6, "max_train_seconds": 30}, confirm={"top_k": 1, "repeats": 2},
                               asha={**asha_on, "incumbent_margin": None}))
    for trial in (fast, slow):
        off.on_trial_add(None, trial)
    off.on_trial_result(None, fast, {"train_seconds": 2.0, "val_accuracy": 0.95})
    assert off.tta_cap() is None
    assert off.on_trial_result(None, slow, {"train_seconds": 9.0, "val_accuracy": 0.7}) == TrialScheduler.CONTINUE


def test_a_resumed_asha_compares_new_trials_with_the_finished_ones():
    """Tune never saves its scheduler: a resumed (or extended) search refills ASHA's rungs from
    the finished trials' reports in the ledger, so a weak new trial is stopped at the first rung
    as it would have been before the search was interrupted."""
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    from autospeed.search.tuner import make_scheduler

    spec = _spec(budget={"trials": 4, "max_train_seconds": 10}, asha={"grace_seconds": 1, "reduction_factor": 2})
    finished = [("strong", False, [(0.5, 0.5), (1.0, 0.9), (2.0, 0.95)]), ("base", True, [(1.0, 0.05)])]
    weak = Trial("autospeed", config={"baseline": False}, trial_id="weak", stub=True)

    fresh = make_scheduler(spec)
    fresh.on_trial_add(None, weak)
    assert fresh.on_trial_result(None, weak, {"train_seconds": 1.0, "val_accuracy": 0.1}) == TrialScheduler.CONTINUE

    resumed = make_scheduler(spec)
    resumed.replay(finished)
    resumed.on_trial_add(None, weak)
    assert resumed.on_trial_result(None, weak, {"train_seconds": 1.0, "val_accuracy": 0.1}) == TrialScheduler.STOP


def test_a_resumed_asha_counts_a_stopped_data_parallel_trial_as_the_live_one_did():
    """A stopped data-parallel trial's ledger history goes on past the report it was stopped on (its workers
    trained to their next evaluation): the resumed ASHA stops counting it there, as the live one did, so its
    later, weak values do not lower the bar of a higher rung for the new trials."""
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    from autospeed.search.tuner import make_scheduler

    spec = _spec(budget={"trials": 4, "max_train_seconds": 10}, asha={"grace_seconds": 1, "reduction_factor": 2})
    finished = [("strong", False, [(1.0, 0.9), (2.0, 0.95)]),
                ("weak", False, [(1.0, 0.1), (2.1, 0.12), (2.1, 0.12)])]  # stopped at 1 s, ended at 2.1 s
    resumed = make_scheduler(spec)
    resumed.replay(finished)
    new = Trial("autospeed", config={"baseline": False}, trial_id="new", stub=True)
    resumed.on_trial_add(None, new)
    resumed.on_trial_result(None, new, {"train_seconds": 1.0, "val_accuracy": 0.9})
    assert resumed.on_trial_result(None, new, {"train_seconds": 2.0, "val_accuracy": 0.6}) == TrialScheduler.STOP


def test_an_extended_search_loop_runs_to_the_new_count():
    """`--resume --trials N`: Tune restores the search loop's saved trial count; ours raises it to N."""
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    from autospeed.search.tuner import SearchUpTo

    def loop(total):
        return SearchUpTo(ConcurrencyLimiter(OptunaSearch(metric="objective", mode="min"), max_concurrent=1), total)

    saved = {"counter": 6, "total_samples": 6, "finished": False, "experiment": None}
    extended = loop(10)
    extended.set_state(saved)
    assert extended.total_samples == 10 and not extended.is_finished()
    same = loop(6)
    same.set_state(saved)
    assert same.total_samples == 6 and same.is_finished()


def test_asha_on_a_loss_target_stops_the_trial_with_the_higher_loss():
    from ray.tune.schedulers import TrialScheduler

    from autospeed.search.tuner import make_scheduler

    spec = _spec(target_accuracy=None, target={"metric": "val_loss", "mode": "min", "value": 0.2},
                 budget={"trials": 4, "max_train_seconds": 10}, asha={"grace_seconds": 1, "reduction_factor": 2})
    asha = make_scheduler(spec)
    low, high = _Trial("low", False), _Trial("high", False)
    for trial in (low, high):
        asha.on_trial_add(None, trial)
    assert asha.on_trial_result(None, low, {"train_seconds": 1.0, "val_loss": 0.4}) == TrialScheduler.CONTINUE
    assert asha.on_trial_result(None, high, {"train_seconds": 1.0, "val_loss": 2.3}) == TrialScheduler.STOP


def test_asha_can_be_turned_off():
    from ray.tune.schedulers import FIFOScheduler

    from autospeed.search.tuner import make_scheduler

    assert isinstance(make_scheduler(_spec(asha={"enabled": False})), FIFOScheduler)


def test_the_stopper_ends_the_search_once_the_callback_has_a_stop_reason():
    from autospeed.search.tuner import ErrorStreakStopper

    class Callback:
        stop_reason = None

    callback = Callback()
    stopper = ErrorStreakStopper(callback)
    assert not stopper.stop_all() and not stopper("t1", {})
    callback.stop_reason = "the last 5 trials failed with the same error: boom"
    assert stopper.stop_all()


def test_long_yaml_halves_from_its_cut_and_ranks_the_trial_asha_let_through_first():
    """search_spaces/long.yaml (issue 43; long_job_bench.md, 'asha from cut to 9c'): ASHA's rungs at its grace and 3x
    it, the trials' budget 9x it, predict off. Trial a (a rung's first trial always goes on) trains to the budget;
    b led it at the first rung and is stopped at the second; c is stopped at the first. The leaderboard (track/runs.py
    ranked, on the censored objective each trial reports) puts a first: a trial compared at its highest rung."""
    from ray.tune.schedulers import TrialScheduler

    from autospeed.outcome import Status, objective
    from autospeed.search.tuner import make_scheduler
    from autospeed.space import load_spec
    from autospeed.track.runs import TrialRow, ranked

    spec = load_spec(str(SMOKE.parent / "long.yaml"))
    grace, budget = spec.asha.grace_seconds, spec.budget.max_train_seconds
    assert spec.asha.enabled and spec.asha.reduction_factor == 3 and budget == pytest.approx(9 * grace)
    assert not spec.predict.enabled  # horizon.py at each trial's own rung missed more often (long_job_bench.md)
    asha = make_scheduler(spec)
    accuracy = {"a": (0.90, 0.93, 0.945), "b": (0.92, 0.925, 0.95), "c": (0.80, 0.99, 0.99)}  # at grace, 3x, budget
    last = {}
    for name, values in accuracy.items():
        trial = _Trial(name, False)
        asha.on_trial_add(None, trial)
        for seconds, value in zip((grace, 3 * grace, budget), values):
            last[name] = (seconds, value)
            if asha.on_trial_result(None, trial, {"train_seconds": seconds, "val_accuracy": value}) == \
                    TrialScheduler.STOP:
                break
    assert {name: seconds for name, (seconds, _) in last.items()} == {"a": budget, "b": 3 * grace, "c": grace}
    target = spec.resolved_target.value
    rows = []
    for name, (seconds, _) in last.items():
        best = max(accuracy[name][:1 + sum(s <= seconds for s in (3 * grace, budget))])
        status = Status.NOT_REACHED if seconds >= budget else Status.STOPPED_EARLY
        rows.append(TrialRow(run_id=name, trial_id=name, kind="trial", baseline=False, status=status.value,
                             tta_seconds=None, best_val_accuracy=best, wall_seconds=None, params={},
                             objective=objective(status, None, best, target, budget)))
    assert [r.trial_id for r in ranked(rows)] == ["a", "b", "c"]
