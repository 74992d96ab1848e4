"""A search's own records and what a resume rebuilds from them (docs/design.md "Crash anywhere, lose nothing").

Three records outlive the driver, each written before the next step relies on it:
- the ledger (`finished/<trial id>.json`, storage.SearchDir): a trial whose MLflow run is final;
- the Optuna study (`optuna.db`): every trial the sampler asked, told only after its ledger entry
  (tuner.LedgerFirstOptuna), each tagged with its Tune trial id (user attr TUNE_TRIAL_ID);
- the MLflow runs: one child run per trial, found again by its trial id tag.

Ray Tune's experiment state is a fourth, restored when it is whole (`Tuner.restore`). When it is
torn or missing (a SIGKILL during Tune's copy of it, or before its first save) the search is
rebuilt from the three: finished trials stay finished, every trial the study asked that did not
finish is asked again with its parameters (a new Tune trial that adopts the old one's MLflow run),
and Tune's files are set aside, not deleted.
"""

from __future__ import annotations

import contextlib
import json
import pickletools
from dataclasses import dataclass, field
from pathlib import Path

from autospeed.search.storage import SearchDir

TUNE_TRIAL_ID = "tune_trial_id"  # Optuna user attr: the Tune trial a study trial was asked for
RERUN_OF = "rerun_of"  # Optuna user attr and trial config key: the unfinished trial this one re-runs
BASELINE = "baseline"  # Optuna user attr and trial config key: the baseline recipe (study trial 0)
# Ray Tune's files at the top of an experiment folder (Ray 2.60): what Tuner.restore reads
TUNE_STATE_PREFIXES = ("experiment_state", "search_gen_state", "searcher-state", "basic-variant-state", "tuner.pkl")
SET_ASIDE = "tune-state-set-aside"
# key of the search's state: the trials finished before its current Tune experiment began (a rebuilt resume's)
TUNE_BASE = "tune_base_trials"


def resume_plan(search_dir: SearchDir, study_name: str, total: int, console) -> tuple[str, int]:
    """How a resumed search goes on, and how many trials its Tuner runs: ("restore", that Tuner's own count) from
    Ray Tune's own state when it is whole and holds every trial it ended in the ledger, else ("rebuild", the
    trials not finished) from the search's records, said in one line. Either way the study is first brought
    level with the ledger. A search whose ledger holds every trial (killed in confirmation or the ablation) has none
    for a Tuner to run: ("restore", 0), Tune's files left as they are."""
    if all_finished(search_dir, total):
        reconcile_study(search_dir, study_name)  # a kill between the last trial's ledger entry and the study
        return "restore", 0
    problem = tune_state_problem(search_dir.path)
    keep: set[str] = set()
    if problem is None:
        try:
            trials = tune_trials(search_dir.path)
        except Exception as e:  # noqa: BLE001 - whole files Ray cannot read back: rebuilt like torn ones
            problem = f"Ray Tune cannot read its state back ({type(e).__name__}: {str(e)[:200]})"
        else:
            keep = {i for i, status in trials.items() if status not in ("TERMINATED", "ERROR")}
            # ended in Tune's eyes but never recorded: stopped by a halt, or its record failed (a full disk)
            lost = [i for i in set(trials) - keep if search_dir.finished(i) is None]
            if lost:
                problem = f"Ray Tune's state holds {counted(len(lost), 'trial')} as ended that never finished"
    state = search_dir.read_state()
    if problem is None:
        reconcile_study(search_dir, study_name, keep)
        # Tune counts only its own trials: a rebuilt search's Tuner began after TUNE_BASE of them had finished
        return "restore", total - state.get(TUNE_BASE, 0)
    finished = len(search_dir.finished_ids())
    aside = set_aside_tune_state(search_dir.path) if tune_state_files(search_dir.path) else None
    fixed = reconcile_study(search_dir, study_name)
    print(f"resume: {problem}; rebuilt the search from its own records: {counted(finished, 'finished trial')} kept "
          f"(ledger), {counted(len(fixed.rerun), 'unfinished trial')} trained again with the same parameters (Optuna "
          f"study, {counted(fixed.study_trials, 'trial')}) into the same MLflow runs"
          + (f"; Tune's files set aside in {aside.name}/" if aside else ""), file=console, flush=True)
    search_dir.write_state({**state, TUNE_BASE: finished})
    return "rebuild", total - finished


def all_finished(search_dir: SearchDir, total: int) -> bool:
    """The ledger holds every one of the search's `total` trials: a resume has no trial left to train."""
    return len(search_dir.finished_ids()) >= total


def counted(count: int, noun: str) -> str:
    """`1 trial`, `3 trials`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def tune_state_files(path: Path) -> list[Path]:
    return sorted(f for f in path.iterdir() if f.is_file() and f.name.startswith(TUNE_STATE_PREFIXES))


def tune_state_problem(path: Path) -> str | None:
    """Why Ray Tune's saved state in `path` cannot be restored (None: every file is whole). Tune copies
    its files over the old ones in place, so a kill during the copy leaves one cut short."""
    files = tune_state_files(path)
    if not any(f.name.startswith("experiment_state") for f in files) or not (path / "tuner.pkl").exists():
        return "Ray Tune had saved no state yet"
    for f in files:
        if not _whole(f.read_bytes()):
            return f"Ray Tune's {f.name} is cut short"
    return None


def _whole(data: bytes) -> bool:
    """A complete JSON document or pickle (Tune writes both, some pickles under .json names)."""
    with contextlib.suppress(ValueError):
        json.loads(data)
        return True
    try:
        for _ in pickletools.genops(data):  # reads every opcode up to STOP; runs none
            continue
    except ValueError:
        return False
    return bool(data)


def set_aside_tune_state(path: Path) -> Path:
    """Move Tune's files into a folder of their own (kept for a post-mortem); the fresh Tuner writes anew."""
    n = 1 + sum(1 for p in path.glob(f"{SET_ASIDE}-*"))
    folder = path / f"{SET_ASIDE}-{n}"
    folder.mkdir()
    for f in tune_state_files(path):
        f.rename(folder / f.name)
    return folder


def tune_trials(path: Path) -> dict[str, str]:
    """Trial id -> status (PENDING, RUNNING, TERMINATED, ERROR...) in Tune's (whole) saved state. A restored Tuner
    runs the unfinished ones again under the same id, so the study's trials for them are left to it."""
    from ray.tune import ExperimentAnalysis

    return {t.trial_id: t.status for t in ExperimentAnalysis(str(path)).trials}


@dataclass
class Reconciled:
    """What a resume found in the study and did about it."""

    told_from_ledger: list[str] = field(default_factory=list)  # finished (in the ledger) before Optuna heard
    rerun: list[str] = field(default_factory=list)  # asked, never finished: asked again with the same parameters
    study_trials: int = 0


def reconcile_study(search_dir: SearchDir, study_name: str, keep: set[str] = frozenset()) -> Reconciled:
    """Bring the study level with the ledger before the trials go on. A study trial still running whose
    Tune trial is in the ledger is told its recorded objective; one that is not (and not among `keep`, the
    trials a restored Tuner resumes) is closed as failed and its parameters are enqueued, marked as a rerun
    of it, so the next trial the sampler asks for trains that recipe again."""
    from optuna.trial import TrialState

    out = Reconciled()
    study = _study(search_dir, study_name)
    if study is None:  # killed before the sampler's first ask: nothing to bring level
        return out
    trials = study.get_trials(deepcopy=False)
    out.study_trials = len(trials)
    for trial in trials:
        if trial.state != TrialState.RUNNING:
            continue  # finished, or WAITING: an earlier resume's rerun, still to be asked
        tune_id = trial.user_attrs.get(TUNE_TRIAL_ID)
        done = search_dir.finished(tune_id) if tune_id else None
        if done is not None:
            study.tell(trial.number, done["objective"])
            out.told_from_ledger.append(tune_id)
        elif tune_id not in keep:
            study.tell(trial.number, state=TrialState.FAIL)
            baseline = bool(trial.user_attrs.get(BASELINE))
            study.enqueue_trial({} if baseline else trial.params, skip_if_exists=False,
                                user_attrs={RERUN_OF: _record_id(trial), BASELINE: baseline})
            out.rerun.append(_record_id(trial))
    return out


def _record_id(trial) -> str:
    """A study trial's name in the records: its Tune trial id, or "study trial N" when a kill came between the
    sampler's ask and Tune naming it (a rerun names the trial it replaces this way)."""
    return trial.user_attrs.get(TUNE_TRIAL_ID) or f"study trial {trial.number}"


def _study(search_dir: SearchDir, study_name: str):
    """The search's Optuna study, or None before its first trial was asked (no study yet)."""
    import optuna

    storage = optuna.storages.RDBStorage(search_dir.optuna_url)
    if study_name not in optuna.study.get_all_study_names(storage):
        return None
    return optuna.load_study(study_name=study_name, storage=storage)


@dataclass
class Audit:
    """Whether a search's records agree: the trial ids each holds as finished."""

    ledger: list[str]
    mlflow: list[str]  # trial child runs that are final (FINISHED or FAILED), by trial id tag
    optuna: list[str]  # finished study trials by Tune trial id, less those a rerun replaced

    @property
    def agree(self) -> bool:
        return (sorted(self.ledger) == sorted(self.mlflow) == sorted(self.optuna)
                and len(set(self.mlflow)) == len(self.mlflow) and len(set(self.optuna)) == len(self.optuna))

    def describe(self) -> str:
        return (f"ledger {len(self.ledger)}, MLflow {len(self.mlflow)} ({len(set(self.mlflow))} distinct), "
                f"Optuna {len(self.optuna)} ({len(set(self.optuna))} distinct) finished trials")


def audit(search_dir: SearchDir, study_name: str, client, parent_run_id: str) -> Audit:
    """Every finished trial, as the ledger, MLflow and Optuna each record it."""
    from autospeed.track import names
    from autospeed.track.runs import child_runs

    ledger = search_dir.finished_ids()
    parent = client.get_run(parent_run_id)
    mlflow = [r.data.tags.get(names.TAG_TRIAL_ID) for r in child_runs(client, parent)
              if r.data.tags.get(names.TAG_KIND) == names.KIND_TRIAL and r.info.status in ("FINISHED", "FAILED")]
    study = _study(search_dir, study_name)
    trials = study.get_trials(deepcopy=False) if study is not None else []
    replaced = {tr.user_attrs.get(RERUN_OF) for tr in trials if tr.user_attrs.get(RERUN_OF)}
    optuna_ids = [_record_id(tr) for tr in trials if tr.state.is_finished() and _record_id(tr) not in replaced]
    return Audit(ledger, mlflow, optuna_ids)
