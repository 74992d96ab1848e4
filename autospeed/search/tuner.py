"""The Ray Tune set-up of a search: Optuna's sampler, ASHA, the stopper, the Tuner itself."""

from __future__ import annotations

import warnings
from pathlib import Path

from ray import tune
from ray.tune import Stopper
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler
from ray.tune.search import ConcurrencyLimiter, SearchGenerator
from ray.tune.search.optuna import OptunaSearch

from autospeed import _ray
from autospeed.recipe import Target
from autospeed.search.storage import SearchDir
from autospeed.space import SearchSpec

OBJECTIVE = "objective"  # every report carries it, minimised (outcome.objective)
WORKERS = "workers"  # every report of a trial carries its data-parallel workers


def make_sampler(spec: SearchSpec, concurrent: int, seed: int):
    """Optuna's TPE (or random) sampler for the space."""
    import optuna

    if spec.sampler.kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # group=True, always: the baseline (study trial 0) samples no parameters, and plain
        # multivariate TPE models only the parameters *every* trial has, so that one empty
        # trial made it sample each knob independently (univariate) for the whole search.
        # The grouped search space skips it, and also covers conditional parameters.
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=spec.sampler.n_startup_trials, multivariate=True,
            group=True, constant_liar=concurrent > 1)


def make_searcher(spec: SearchSpec, storage_url: str, study_name: str, concurrent: int, seed: int):
    """Ray's OptunaSearch over the space's define-by-run function, with its study in `storage_url`."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return LedgerFirstOptuna(spec, metric=OBJECTIVE, mode="min", sampler=make_sampler(spec, concurrent, seed),
                             study_name=study_name, storage=optuna.storages.RDBStorage(storage_url))


class LedgerFirstOptuna(OptunaSearch):
    """Ray's OptunaSearch with two additions that let a resume rebuild the search from its records
    (search/records.py):
    - each study trial carries its Tune trial id (user attr `tune_trial_id`), and a study trial enqueued
      as a rerun of an unfinished one (`rerun_of`) gives its trial config that key, so the new trial
      takes over the old one's MLflow run;
    - a trial's result is told to the study only after the tracking callback has put it in the ledger
      (`tell`): Tune tells the searcher first, and a kill between the two would leave a study trial
      finished that the ledger and MLflow do not hold."""

    def __init__(self, spec: SearchSpec, **kwargs):
        self.spec = spec
        self._asking: str | None = None
        self._untold: dict[str, tuple[dict | None, bool]] = {}
        super().__init__(space=self._define_by_run, **kwargs)

    def _define_by_run(self, trial) -> dict:
        from autospeed.search.records import BASELINE, RERUN_OF, TUNE_TRIAL_ID

        trial.set_user_attr(TUNE_TRIAL_ID, self._asking)
        if trial.user_attrs.get(RERUN_OF) is not None:  # enqueued by a resume: the same recipe, trained again
            if trial.user_attrs.get(BASELINE):
                return {"baseline": True, RERUN_OF: trial.user_attrs[RERUN_OF]}
            self.spec.suggest(trial)
            return {"baseline": False, RERUN_OF: trial.user_attrs[RERUN_OF]}
        return self.spec.define_by_run(trial)

    def restore(self, checkpoint_path: str) -> None:
        """Tune restores the pickled searcher's whole state into this one: keep this process's define-by-run
        function (the pickled one belongs to the dead process's copy) and its own untold results (a dead
        process's untold ones are told from the ledger: records.reconcile_study)."""
        mine = {"spec": self.spec, "_space": self._space, "_asking": None, "_untold": self._untold}
        super().restore(checkpoint_path)
        self.__dict__.update(mine)

    def suggest(self, trial_id: str):
        self._asking = trial_id
        return super().suggest(trial_id)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self._untold[trial_id] = (result, error)  # told once the ledger holds the trial (tell)

    def tell(self, trial_id: str) -> None:
        """Tell the study the trial's result, now that the ledger holds it."""
        if trial_id in self._untold:
            result, error = self._untold.pop(trial_id)
            super().on_trial_complete(trial_id, result=result, error=error)


class BaselineKeepingASHA(ASHAScheduler):
    """ASHA on the train clock that records the baseline at every rung but never stops it:
    the speed-up needs the baseline's full TTA as its reference. The baseline trains to its own
    end (target, epochs, or its `max_train_seconds`, which the space's `baseline` may set above the
    trials' budget so that a slow baseline still reaches the target).

    With `incumbent_margin` it also stops a trial whose train clock has passed that many times the
    `keep`-th best TTA reached so far (`keep`: the recipes confirmation re-runs, confirm.top_k)
    without reaching the target: its TTA can no longer put it among them, whatever its rung says.
    ASHA's rungs compare progress; this compares with the objective itself, a TTA. The margin is
    above 1 because confirmation re-ranks within the noise of one TTA measurement (fast.yaml's top
    recipes: up to +-20% between seeds).

    A data-parallel trial (one whose reports name a stop file: it drives Ray Train workers) is stopped
    like any other, but by its workers: the scheduler writes that file (data_parallel.request_stop)
    and lets the trial go on; the workers end the Ray Train run at their next evaluation and the trial ends
    with its final report (`stopped_early`), its cores freed by Ray Train's own shutdown. Tune's STOP would end the
    trial's actor and with it Ray Train's controller, whose workers' placement group then outlived
    them (Ray 2.60, without the dashboard's state API): the next trial never got the cores. The rungs
    keep the report the stop was decided on, as for a trial Tune stops; its later reports are not
    counted."""

    def __init__(self, *, max_t: float, target: Target, keep: int = 1, incumbent_margin: float | None = None,
                 **kwargs):
        super().__init__(max_t=max_t, metric=target.metric, mode=target.mode, **kwargs)
        self.max_train_seconds = max_t
        self.target = target
        self.target_metric = target.metric
        self.keep = max(1, keep)
        self.incumbent_margin = incumbent_margin
        self.reached_seconds: dict[str, float] = {}  # trial id -> its TTA (the baseline's not among them)
        self.stopping: dict[str, dict] = {}  # data-parallel trial asked to stop -> the report it was stopped on

    def tta_cap(self) -> float | None:
        """Train seconds past which an unreached trial cannot be among the `keep` best (None: not yet known)."""
        if self.incumbent_margin is None or len(self.reached_seconds) < self.keep:
            return None
        return self.incumbent_margin * sorted(self.reached_seconds.values())[self.keep - 1]

    def on_trial_result(self, tune_controller, trial, result):
        from autospeed.search.data_parallel import STOP_FILE, request_stop

        if trial.trial_id in self.stopping:  # its workers stop at their next evaluation: no longer counted
            return TrialScheduler.CONTINUE
        decision = self._decide(tune_controller, trial, result)
        if decision == TrialScheduler.STOP and result.get(STOP_FILE):  # a trial that drives Ray Train workers
            request_stop(result[STOP_FILE])
            self.stopping[trial.trial_id] = result
            return TrialScheduler.CONTINUE
        return decision

    def _decide(self, tune_controller, trial, result):
        """ASHA's decision, but the baseline goes on, and a trial past the incumbents' cap stops."""
        decision = super().on_trial_result(tune_controller, trial, result)
        if trial.config.get("baseline"):  # to its own end: the baseline may have a longer budget than the trials
            return TrialScheduler.CONTINUE
        if result.get("duplicate_of"):  # an earlier trial's result handed back: that trial counted already
            return decision
        seconds = result.get("train_seconds", 0.0)
        if self.target.met(result.get(self.target_metric)):
            self.reached_seconds.setdefault(trial.trial_id, result.get("tta_seconds") or seconds)
            return decision
        cap = self.tta_cap()
        if cap is not None and seconds > cap:
            return TrialScheduler.STOP
        return decision

    def on_trial_complete(self, tune_controller, trial, result):
        # A data-parallel trial asked to stop ends a moment later on its own: the rungs take the report it was
        # stopped on, as Tune hands them a stopped trial's last report.
        super().on_trial_complete(tune_controller, trial, self.stopping.pop(trial.trial_id, result))

    def replay(self, finished: list[tuple[str, bool, list[tuple[float, float]]]]) -> None:
        """Refill the rungs with finished trials' reports (trial id, baseline, (train seconds, target
        metric) in order): a resumed search's ASHA compares new trials with the old ones. Tune does not save its
        scheduler, so without this a resumed search's ASHA would start empty."""
        for trial_id, baseline, history in finished:
            past = Trial("autospeed", config={"baseline": baseline}, trial_id=trial_id, stub=True)
            self.on_trial_add(None, past)
            last = None
            for train_seconds, value in history:
                last = {"train_seconds": train_seconds, self.target_metric: value}
                if self.on_trial_result(None, past, last) == TrialScheduler.STOP:
                    break  # Tune stopped it here (a data-parallel trial trained on to its next evaluation, uncounted)
            if last is not None:
                self.on_trial_complete(None, past, last)
            else:
                self.on_trial_remove(None, past)


class ExplorationBudget:
    """budget.exploration_baseline_runs as seconds of train clock: every trial's latest train_seconds, summed,
    against `cap_seconds`. A resumed search starts from its finished trials' (`spent`: trial id -> seconds)."""

    def __init__(self, cap_seconds: float, spent: dict[str, float] | None = None):
        self.cap_seconds = cap_seconds
        self.seconds: dict[str, float] = dict(spent or {})

    def record(self, trial_id: str, result: dict | None) -> None:
        if result and result.get("train_seconds") is not None:
            self.seconds[trial_id] = max(self.seconds.get(trial_id, 0.0), float(result["train_seconds"]))

    @property
    def spent_seconds(self) -> float:
        return sum(self.seconds.values())

    def spent(self) -> bool:
        return self.spent_seconds >= self.cap_seconds


class SearchUpTo(SearchGenerator):
    """Tune's own search loop around the Optuna searcher, for `total` trials.

    A resumed search restores the loop's state, trial count included, from its experiment
    folder; `--resume --trials N` extends it: the restored count is raised to N, and the
    restored Optuna study and sampler go on asking (the new trials follow the old ones).

    With an ExplorationBudget, no trial starts once it is spent (ErrorStreakStopper, which sees every report, keeps
    its count and ends the running ones): the loop finishes, and Tune saves that with its state."""

    def __init__(self, searcher, total: int, budget: ExplorationBudget | None = None):
        super().__init__(searcher)
        self.total = total
        self.budget = budget

    def set_state(self, state: dict) -> None:
        super().set_state({**state, "total_samples": max(state["total_samples"], self.total)})

    def next_trial(self):
        if self.budget is not None and self.budget.spent():
            self._finished = True
            return None
        return super().next_trial()


def make_scheduler(spec: SearchSpec) -> TrialScheduler:
    """ASHA on the train clock over the target metric in its direction (val_loss: lower survives)."""
    if not spec.asha.enabled:
        return FIFOScheduler()
    return BaselineKeepingASHA(time_attr="train_seconds", target=spec.resolved_target, keep=spec.confirm.top_k,
                               incumbent_margin=spec.asha.incumbent_margin,
                               max_t=spec.budget.max_train_seconds, grace_period=spec.asha.grace_seconds,
                               reduction_factor=spec.asha.reduction_factor)


class ErrorStreakStopper(Stopper):
    """Ends the whole search when the tracking callback has seen the same error too many
    trials in a row (callback.stop_reason): the search is broken, not the recipes; or when it
    halts the search (callback.halt: run.py then stops it as interrupted). With an ExplorationBudget, a spent one
    also ends every running trial but the baseline (the speed-up's reference) at its next report.

    Tune pickles its stopper into the experiment state; the callback pickles to nothing,
    and a resumed search attaches this process's stopper and callback (_ray.reattach).
    """

    def __init__(self, callback, budget: ExplorationBudget | None = None):
        self.callback = callback
        self.budget = budget

    def __call__(self, trial_id, result) -> bool:
        if self.budget is None:
            return False
        self.budget.record(trial_id, result)
        return self.budget.spent() and not (result.get("config") or {}).get("baseline")

    def stop_all(self) -> bool:
        # also when the callback halts the search (a tracking store silent past its grace, a full disk)
        return (getattr(self.callback, "stop_reason", None) is not None
                or getattr(self.callback, "halt", None) is not None)


def build_tuner(spec: SearchSpec, trainable, search_dir: SearchDir, callback, *, trials: int, concurrent: int,
                seed: int, resume: str | None, verbose: bool,
                budget: ExplorationBudget | None = None) -> tuple[tune.Tuner, LedgerFirstOptuna]:
    """A Tuner for `trials` trials and its Optuna searcher (the tracking callback tells it each result once the
    ledger holds it). `resume`: None (a new search), "restore" (the search's own Tuner from its whole experiment
    state, `Tuner.restore`; `trials` is that Tuner's own count: the search's less those finished before it
    began) or "rebuild" (Tune's state torn, missing or short of finished trials: a new Tuner for the `trials`
    not yet finished, its study the search's, search/records.py).

    A resumed one runs with this process's search loop (raised to `trials` when the search was extended), its
    ASHA refilled from the finished trials, and its callback and stopper."""
    stopper = ErrorStreakStopper(callback, budget)
    searcher = make_searcher(spec, search_dir.optuna_url, spec.name, concurrent, seed)
    search = SearchUpTo(ConcurrencyLimiter(searcher, max_concurrent=concurrent), total=trials, budget=budget)
    scheduler = make_scheduler(spec)
    if resume and isinstance(scheduler, BaselineKeepingASHA):
        scheduler.replay(search_dir.histories())
    if resume == "restore":
        tuner = tune.Tuner.restore(str(search_dir.path), trainable=trainable, resume_unfinished=True,
                                   resume_errored=False, restart_errored=False)
        _ray.reattach(tuner, [callback], stopper, verbose, search=search, scheduler=scheduler)
        return tuner, searcher
    return tune.Tuner(
        trainable,
        # The search loop is built here (not from max_concurrent_trials) so a resumed search can swap in its own.
        # A data-parallel trial's actor drives its Ray Train run; Tune fails the next trial when a reuse fails,
        # and reusing such actors was never tried: no reuse in such searches.
        tune_config=tune.TuneConfig(search_alg=search, scheduler=scheduler, num_samples=trials,
                                    reuse_actors=spec.most_workers()[0] == 1),
        run_config=tune.RunConfig(name=search_dir.path.name, storage_path=str(Path(search_dir.path).parent),
                                  verbose=2 if verbose else 0, callbacks=[callback], stop=stopper,
                                  # a trial never retries: its failures are results (an OOM repeats)
                                  failure_config=tune.FailureConfig(max_failures=0),
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1)),
    ), searcher
