"""The trials stage of a search: every trial under Ray Tune, each tracked as it reports (search/callback.py), and
how the trials ended (docs/design.md "Data flow", "Early stopping (ASHA)"). search/run.py calls it after the probe.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from autospeed.outcome import Status
from autospeed.search.session import SearchSession
from autospeed.search.storage import write_refused
from autospeed.space import SearchSpec
from autospeed.track import runs


@dataclass(frozen=True)
class TrialPlan:
    """How the trials run: how many in all, the sampler's seed, each trial's Ray resources, how many at once and
    the threads each trains with; `resumed`: an earlier session's search goes on."""

    total: int
    seed: int
    resources: dict[str, float]
    concurrent: int
    threads: int
    resumed: bool
    verbose: bool


def run_trials(spec: SearchSpec, session: SearchSession, plan: TrialPlan) -> tuple[bool, str | None, str | None]:
    """Every trial under Ray Tune. Returns (interrupted, stop reason, halt: why the search must stop as
    interrupted, resumable: its tracking store silent past the grace, its storage refusing writes).

    Tune records the trials a halt stopped as ended, though none reached its end; the resume sees them missing
    from the ledger and rebuilds from the records, which train them again (records.resume_plan)."""
    from autospeed.search.callback import TrialTracker
    from autospeed.search.records import resume_plan
    from autospeed.search.tuner import build_tuner

    search_dir = session.search_dir
    tracker = TrialTracker(session, spec, plan.total, resumed=plan.resumed)
    interrupted = False
    mode, to_run = (resume_plan(search_dir, spec.name, plan.total, session.console) if plan.resumed
                    else (None, plan.total))
    budget = _exploration_budget(spec, session)
    try:
        if to_run > 0:  # a rebuilt search whose trials had all finished has none left to run
            tuner, tracker.searcher = build_tuner(spec, _trainable(spec, session, plan), search_dir, tracker,
                                                  trials=to_run, concurrent=plan.concurrent, seed=plan.seed,
                                                  resume=mode, verbose=plan.verbose, budget=budget)
            tuner.fit()  # on Ctrl-C/SIGTERM Tune stops the trials, saves the experiment and returns
    except KeyboardInterrupt:
        interrupted = True
    except Exception as e:  # noqa: BLE001 - Optuna's or Tune's own write refused by a full disk: a halt too
        tracker.halt = tracker.halt or write_refused(e, search_dir.path / "optuna.db")
        if tracker.halt is None:
            raise
    finally:
        tracker.view.close()
    if tracker.halt is not None:  # Tune holds the trials it stopped as ended: the resume rebuilds (records.resume_plan)
        return True, None, tracker.halt
    total = search_dir.read_state().get("trials", plan.total)
    if budget is not None and budget.spent() and not interrupted:
        total = _exploration_spent(spec, session, budget, total)
    return _trials_ended(spec, session, tracker, total, interrupted)


def _exploration_budget(spec: SearchSpec, session: SearchSession):
    """budget.exploration_baseline_runs in train-clock seconds, with what the finished trials spent (a resumed
    search's); None without the key."""
    from autospeed.search.tuner import ExplorationBudget

    runs_ = spec.budget.exploration_baseline_runs
    if runs_ is None:
        return None
    spent = {trial_id: history[-1][0] for trial_id, _, history in session.search_dir.histories() if history}
    return ExplorationBudget(runs_ * spec.confirm.baseline_tta_seconds, spent)


def _exploration_spent(spec: SearchSpec, session: SearchSession, budget, total: int) -> int:
    """The trials ended with the exploration budget spent: the search's count of trials becomes those it started,
    every one finished (kept in its state, so that a resume and `--resume --trials N` add none), said in one line.
    Returns that count."""
    from autospeed.search.records import counted

    started = len(session.search_dir.finished_ids())
    if started < total:
        session.search_dir.write_state({**session.search_dir.read_state(), "trials": started})
        print(f"exploration budget spent: {budget.spent_seconds:.1f} s of the trials' train clock >= "
              f"{spec.budget.exploration_baseline_runs:g} baseline runs ({budget.cap_seconds:.1f} s, the given "
              f"baseline TTA {spec.confirm.baseline_tta_seconds:g} s each): no new trial after "
              f"{counted(started, 'trial')} of {total}", file=session.console, flush=True)
    return min(started, total)


def _trainable(spec: SearchSpec, session: SearchSession, plan: TrialPlan):
    """The trainable Tune runs, with the spec, threads and search folder bound and each trial's resources."""
    from ray import tune

    from autospeed.search.trainable import trainable, trial_resources

    spec_json, resources, gpus = spec.model_dump_json(), plan.resources, plan.resources["gpu"]
    if spec.most_workers()[0] > 1:
        # Per trial: a one-worker trial holds its resources itself, a data-parallel one only its driver's
        # share (Ray Train's workers reserve theirs).
        resources = functools.partial(trial_resources, spec_json=spec_json, cpus=resources["cpu"], gpus=gpus)
    return tune.with_resources(tune.with_parameters(trainable, spec_json=spec_json, threads=plan.threads,
                                                    search_dir=str(session.search_dir.path), gpus=gpus), resources)


def _trials_ended(spec: SearchSpec, session: SearchSession, tracker, total: int,
                  interrupted: bool) -> tuple[bool, str | None, str | None]:
    """After Tune returned: the trials' records delivered to the store (an interrupted search waits only a
    moment), then whether the search ended interrupted, stopped itself, or neither."""
    unsent = session.outbox.unsent(min(10.0, spec.tracking.grace_seconds) if interrupted
                                   else spec.tracking.grace_seconds)
    if unsent is not None:
        return True, None, unsent
    if tracker.told_down:
        tracker.say_tracking_back()
    rows = runs.trial_rows(session.client, session.client.get_run(session.parent_id))
    unfinished = len(rows) < total or any(r.status == Status.RUNNING for r in rows)
    return interrupted or (unfinished and tracker.stop_reason is None), tracker.stop_reason, None
