"""The search: Ray Tune schedules trials, Optuna's TPE picks recipes, ASHA stops
weak trials, MLflow records every trial (DESIGN.md "Data flow").

Layout on disk, per search:
    <storage_path>/<name>/<search_id>/            Ray Tune experiment (Tuner.restore reads it)
    <storage_path>/<name>/<search_id>/optuna.db   Optuna study (optuna.load_study / optuna-dashboard)
    <storage_path>/<name>/<search_id>/autospeed_search.json   search id, parent run, space
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import signal
import sys
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autospeed import results as res
from autospeed import tracking as t
from autospeed.errors import RunFailure, UserError
from autospeed.space import SearchSpec
from autospeed.yamlio import write_atomic

STATE_FILE = "autospeed_search.json"
RECIPES_DIR = "recipes"  # <exp_dir>/recipes/<recipe key>.json: the first trial of each recipe and its result
FINAL = "final"  # key of the last report of a trial that ended on its own


# ------------------------------------------------------------------ trainable
_WORKLOADS: dict[str, Any] = {}  # per actor process: reused actors skip even the memory-mapped load


def _trainable(config: dict[str, Any], spec_json: str, threads: int, ledger_dir: str) -> None:
    """The thin Ray adapter: config -> Recipe -> trainer, evaluations -> tune.report."""
    from ray import tune

    done = Path(ledger_dir) / f"{tune.get_context().get_trial_id()}.json"
    if done.exists():
        # Finished (and recorded in MLflow) before a kill that beat Tune's state save:
        # hand Tune the recorded outcome instead of training it again.
        tune.report(json.loads(done.read_text()))
        return

    from autospeed.trainer import train
    from autospeed.workloads import load_workload

    spec = SearchSpec.model_validate_json(spec_json)
    params = {k: v for k, v in config.items() if k != "baseline"}
    recipe = spec.recipe_for(params, baseline=config.get("baseline", False))
    key = json.dumps([recipe.workload, recipe.workload_options], sort_keys=True)
    if key not in _WORKLOADS:
        _WORKLOADS.clear()
        _WORKLOADS[key] = load_workload(recipe.workload, recipe.workload_options)
    target, budget = recipe.target_accuracy, recipe.max_train_seconds
    recipe_key = _recipe_key(recipe.training_fields())
    earlier = _recipe_index(Path(ledger_dir).parent, recipe_key)
    if earlier.exists():
        # The sampler proposed a recipe this search already trained (TPE does on discrete
        # spaces): hand back that result instead of spending the compute again.
        first = json.loads(earlier.read_text())
        tune.report({**first, FINAL: True, "duplicate_of": first["trial_id"], "recipe_key": recipe_key,
                     "train_seconds": 0.0, "wall_seconds": 0.0, "step": 0, "recipe_yaml": recipe.to_yaml()})
        return

    def on_eval(e) -> None:
        tta = e.train_seconds if e.reached else None
        tune.report({
            "step": e.step, "epoch": e.epoch, "train_seconds": e.train_seconds, "wall_seconds": e.wall_seconds,
            "val_accuracy": e.val_accuracy,
            "best_val_accuracy": e.best_val_accuracy, "train_loss": e.train_loss,
            "samples_per_second": e.samples_per_second, FINAL: False,
            # an ASHA-stopped trial never sends the final report: its run takes these from here
            "compile_seconds": e.compile_seconds, "peak_memory_mb": e.peak_memory_mb, "recipe_key": recipe_key,
            "objective": res.objective("running", tta, e.best_val_accuracy, target, budget),
        })

    r = train(recipe, _WORKLOADS[key], on_eval=on_eval, num_threads=threads)
    tune.report({
        FINAL: True, "status": r.status, "step": r.steps, "train_seconds": r.train_seconds,
        "val_accuracy": r.best_val_accuracy, "best_val_accuracy": r.best_val_accuracy,
        "tta_seconds": r.tta_seconds, "wall_seconds": r.wall_seconds, "compile_seconds": r.compile_seconds,
        "peak_memory_mb": r.peak_memory_mb, "samples_per_second": r.samples_per_second,
        "objective": res.objective(r.status, r.tta_seconds, r.best_val_accuracy, target, budget),
        "error": r.error or "", "applied": json.dumps(r.applied), "environment": json.dumps(r.environment),
        "recipe_yaml": recipe.to_yaml(), "recipe_key": recipe_key,
    })


def _recipe_index(exp_dir: Path, recipe_key: str) -> Path:
    return exp_dir / RECIPES_DIR / f"{recipe_key}.json"


def _recipe_key(fields: dict[str, Any]) -> str:
    """Identity of a recipe: every training field (seed included), hashed."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:20]


# ------------------------------------------------------------------ tracking callback
def _tune_callback_base():
    from ray.tune import Callback

    return Callback


class _Tracker:
    """Ray Tune callback (driver side): one MLflow child run per trial.

    Child runs are found again by trial id after a resume, so a trial never gets two.
    """

    def __init__(self, client, experiment_id: str, parent_run_id: str, search_id: str, spec: SearchSpec,
                 total: int, console, ledger_dir: Path):
        self.client, self.experiment_id, self.parent = client, experiment_id, parent_run_id
        self.search_id, self.spec, self.total, self.console = search_id, spec, total, console
        self.runs: dict[str, str] = {}
        self.ledger_dir = ledger_dir  # one JSON per trial whose MLflow run is final
        self.replayed: set[str] = set()
        self.errors_in_a_row: list[str] = []
        self.stop_reason: str | None = None
        for run in res.child_runs(client, client.get_run(parent_run_id)):
            if run.data.tags.get(t.TAG_KIND) == t.KIND_TRIAL:
                self.runs[run.data.tags.get(t.TAG_TRIAL_ID)] = run.info.run_id
        from autospeed.live import SearchView

        self.view = SearchView(total=total, stream=console)
        for r in res.trial_rows(client, client.get_run(parent_run_id)):  # a resumed search counts its past
            if r.status != "running":
                self.view.seed_finished("baseline" if r.baseline else r.trial_id, r.status, r.tta_seconds,
                                        r.best_val_accuracy or 0.0, r.baseline, r.knobs())

    def __getstate__(self) -> dict[str, Any]:
        # Ray pickles callbacks into its experiment state (tuner.pkl). The MLflow
        # client, console and live view belong to this process; --resume attaches
        # a fresh tracker (_reattach), so nothing of this one needs to survive.
        return {}

    def _recipe_fields(self, trial) -> dict[str, Any]:
        cfg = trial.config
        params = {k: v for k, v in cfg.items() if k != "baseline"}
        return self.spec.recipe_for(params, baseline=cfg.get("baseline", False)).training_fields()

    def _ledger(self, trial) -> Path:
        return self.ledger_dir / f"{trial.trial_id}.json"

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        from mlflow.entities import RunStatus

        baseline = bool(trial.config.get("baseline"))
        run_id = self.runs.get(trial.trial_id)
        if run_id is not None and self._ledger(trial).exists():
            self.replayed.add(trial.trial_id)  # its run is final already; the trainable replays it
            return
        if run_id is None:
            index = int(trial.trial_id.rsplit("_", 1)[-1]) if "_" in trial.trial_id else len(self.runs)
            run = self.client.create_run(self.experiment_id, run_name="baseline" if baseline else f"trial-{index:03d}",
                                         tags={t.TAG_PARENT: self.parent, t.TAG_SEARCH_ID: self.search_id,
                                               t.TAG_TRIAL_ID: trial.trial_id, t.TAG_KIND: t.KIND_TRIAL,
                                               t.TAG_BASELINE: str(baseline).lower()})
            run_id = self.runs[trial.trial_id] = run.info.run_id
            t.log_batch(self.client, run_id, params=t.recipe_params(self._recipe_fields(trial)))
        else:  # resumed: the same run continues
            self.client.update_run(run_id, RunStatus.to_string(RunStatus.RUNNING))
        self.client.set_tag(run_id, t.TAG_STATUS, "running")
        self.view.started(trial.trial_id, "baseline" if baseline else trial.trial_id)

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        if result.get(FINAL) is False and trial.trial_id not in self.replayed:
            t.log_batch(self.client, self.runs[trial.trial_id], t.eval_metrics(result))

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        last = trial.last_result or {}
        if trial.trial_id in self.replayed:
            return
        if last.get(FINAL):
            status = last["status"]
        elif (last.get("best_val_accuracy") or 0.0) >= self.spec.target_accuracy:
            # ASHA's max_t ended it on the very evaluation that reached the target
            # (the trainer stops there too): that evaluation's train clock is the TTA.
            status = "reached"
            last = {**last, "tta_seconds": last["train_seconds"]}
        elif last.get("train_seconds", 0.0) >= self.spec.budget.max_train_seconds:
            status = "not_reached"  # ASHA's max_t ended it at the budget, a moment before the trainer would
        else:
            status = "stopped_early"  # ASHA stopped it at a rung
        self._finish(trial, status, last, last.get("error") or None)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        message = "trial process failed"
        if getattr(trial, "error_file", None) and os.path.exists(trial.error_file):
            lines = [ln for ln in Path(trial.error_file).read_text().splitlines() if ln.strip()]
            message = lines[-1] if lines else message
        self._finish(trial, "failed", trial.last_result or {}, message)

    def _finish(self, trial, status: str, last: dict[str, Any], error: str | None) -> None:
        from mlflow.entities import RunStatus

        run_id = self.runs[trial.trial_id]
        target, budget = self.spec.target_accuracy, self.spec.budget.max_train_seconds
        best = last.get("best_val_accuracy", 0.0) or 0.0
        tta = last.get("tta_seconds") if status == "reached" else None
        final = {
            "tta_seconds": tta, "best_val_accuracy": best, "wall_seconds": last.get("wall_seconds"),
            "compile_seconds": last.get("compile_seconds"), "peak_memory_mb": last.get("peak_memory_mb"),
        }
        objective = res.objective(status, tta, best, target, budget)
        tags = {t.TAG_STATUS: status}
        if error:
            tags[t.TAG_ERROR] = error[:500]
        if last.get("duplicate_of"):
            tags[t.TAG_DUPLICATE_OF] = last["duplicate_of"]
        if last.get("environment"):
            tags.update(t.environment_tags(json.loads(last["environment"])))
        if last.get("applied"):
            tags["autospeed.applied"] = last["applied"]
        t.log_batch(self.client, run_id, t.final_metrics(final, objective), tags=tags)
        if last.get("recipe_yaml"):
            self.client.log_text(run_id, last["recipe_yaml"], "recipe.yaml")
        else:
            from autospeed.recipe import Recipe

            self.client.log_text(run_id, Recipe(**self._recipe_fields(trial)).to_yaml(), "recipe.yaml")
        failed = status in res.INFEASIBLE
        self.client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED if failed else RunStatus.FINISHED))
        write_atomic(self._ledger(trial), json.dumps({
            FINAL: True, "status": status, "tta_seconds": tta, "objective": objective, "best_val_accuracy": best,
            "val_accuracy": best, "train_seconds": last.get("train_seconds", 0.0), "step": last.get("step", 0)}))
        # Index the recipe's first outcome for later repeats; not a crash of the trial process,
        # which says nothing about the recipe (only failures the trainer reported are indexed).
        key = last.get("recipe_key")
        recipe_outcome = status != "failed" or bool(last.get(FINAL))
        index = _recipe_index(self.ledger_dir.parent, key) if key else None
        if index is not None and recipe_outcome and not last.get("duplicate_of") and not index.exists():
            write_atomic(index, json.dumps({
                "trial_id": trial.trial_id, "status": status, "tta_seconds": tta, "objective": objective,
                "best_val_accuracy": best, "val_accuracy": best, "error": error or "",
                "compile_seconds": last.get("compile_seconds"), "peak_memory_mb": last.get("peak_memory_mb")}))
        self._progress(trial, status, tta, best, last.get("duplicate_of"))
        # The same error N trials in a row means the search is broken, not the recipes.
        # "The same" ignores numbers: OOM sizes, step counts and addresses differ between trials.
        if status in res.INFEASIBLE and error:
            self.errors_in_a_row.append(error)
        else:
            self.errors_in_a_row.clear()
        n = self.spec.max_consecutive_errors
        if len(self.errors_in_a_row) >= n and len({_error_kind(e) for e in self.errors_in_a_row[-n:]}) == 1:
            self.stop_reason = f"the last {n} trials failed with the same error: {self.errors_in_a_row[-1]}"

    def _progress(self, trial, status: str, tta: float | None, best: float, duplicate_of: str | None = None) -> None:
        baseline = bool(trial.config.get("baseline"))
        label = "baseline" if baseline else trial.trial_id
        if duplicate_of:
            label += f" (repeats {duplicate_of}'s recipe: its result, not trained again)"
        self.view.finished(trial.trial_id, label, status, tta, best, baseline, {} if baseline else trial.config)


def _error_kind(error: str) -> str:
    """An error's first line with its numbers masked: what makes two trials' errors 'the same'."""
    return re.sub(r"0x[0-9a-fA-F]+|\d+(\.\d+)?", "#", error.strip().splitlines()[0] if error.strip() else "")


def _make_tracker(*args, **kwargs):
    """A _Tracker that is also a ray.tune.Callback (Ray is imported lazily)."""
    cls = type("MlflowTrialTracker", (_Tracker, _tune_callback_base()), {})
    return cls(*args, **kwargs)


_ACTIVE_TRACKER: list[_Tracker] = []  # the tracker of the search running in this process


class _ConsecutiveErrorStopper:
    """ray.tune Stopper that ends the whole search when the tracker says so.

    Stateless on purpose: Tune pickles its stopper into the experiment state and
    a restored search gets the pickled one back, so it reads this process's tracker.
    """

    def __call__(self, trial_id, result) -> bool:
        return False

    def stop_all(self) -> bool:
        return bool(_ACTIVE_TRACKER) and _ACTIVE_TRACKER[-1].stop_reason is not None


# ------------------------------------------------------------------ orchestration
@dataclass
class SearchOutcome:
    name: str
    search_id: str
    parent_run_id: str
    experiment_dir: Path
    rows: list[res.TrialRow]
    interrupted: bool
    stop_reason: str | None
    wall_seconds: float


def _quiet_ray() -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network calls home
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no CSV/JSON/TensorBoard loggers
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "100")
    # Save Tune's experiment state after every event, so a killed search loses no finished trial.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "0")
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    for name in ("ray", "ray.tune", "ray.train", "ray.air"):
        logging.getLogger(name).setLevel(logging.ERROR)
    state_logger = logging.getLogger("ray.tune.execution.experiment_state")
    if not any(isinstance(f, _SnapshotRaceFilter) for f in state_logger.filters):
        state_logger.addFilter(_SnapshotRaceFilter())
    warnings.filterwarnings("ignore", module="ray")
    # A resumed trial reports its steps again to the same Optuna trial; Optuna keeps the first.
    warnings.filterwarnings("ignore", message="The reported value is ignored")


class _SnapshotRaceFilter(logging.Filter):
    """Drops Ray Tune's harmless "Saving experiment state ... failed" traceback.

    Ray Tune (2.60) writes the next snapshot of the experiment state into its staging
    folder while the previous snapshot is still being copied to the storage path; when
    the copy lists a temporary file (`.<uuid>-tmp-searcher-state-*.pkl`) that the new
    write has renamed meanwhile, the copy fails with FileNotFoundError and Tune logs the
    traceback. Nothing is lost: the snapshot being written is copied next, and the last
    one is copied and awaited when the search ends. Every other failure is kept.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, FileNotFoundError) and "-tmp-" in str(exc)
                    and str(record.msg).startswith("Saving experiment state"))


_RAY_ADDRESS = re.compile(r"^(?:ray://)?(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\]):(?P<port>[0-9]{1,5})$")


def check_ray_address(address: str | None, timeout_seconds: float = 5.0) -> None:
    """Preflight for --ray-address: malformed is bad input (exit 2), unreachable a
    runtime failure (exit 1). `ray.init` itself would retry a dead address for minutes."""
    if not address or address in ("auto", "local"):
        return
    m = _RAY_ADDRESS.match(address)
    if not m or not 0 < int(m["port"]) < 65536:
        raise UserError(f"--ray-address: malformed address '{address}'; use host:port (e.g. 10.0.0.5:6379), "
                        f"ray://host:10001 or auto")
    import socket

    host = m["host"].strip("[]")
    try:
        socket.create_connection((host, int(m["port"])), timeout=timeout_seconds).close()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise RunFailure(f"--ray-address: cannot reach Ray at {address} ({why}); start it there with "
                         f"`ray start --head` or fix the address") from None


def _start_ray(address: str | None, verbose: bool) -> None:
    import ray

    if ray.is_initialized():
        return
    check_ray_address(address)
    kwargs = dict(include_dashboard=False, log_to_driver=verbose, logging_level=logging.INFO if verbose else logging.ERROR,
                  configure_logging=True)
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(**kwargs)
    except (ConnectionError, TimeoutError, RuntimeError) as e:
        where = address or "a local Ray instance"
        raise RunFailure(f"cannot start or join Ray at {where} ({str(e).splitlines()[0][:200]}); "
                         f"check --ray-address or that `ray start` runs there") from None


def _resources(spec: SearchSpec) -> tuple[dict[str, float], int, int]:
    """(per-trial resources, concurrent trials, torch threads per trial)."""
    import ray

    cluster = ray.cluster_resources()
    gpus = spec.resources.gpus_per_trial
    if gpus:
        cpus = spec.resources.cpus_per_trial or 4
        concurrent = spec.resources.max_concurrent_trials or max(1, int(cluster.get("GPU", 0) // gpus))
        if cluster.get("GPU", 0) < gpus:
            raise RunFailure(f"resources.gpus_per_trial is {gpus} but Ray sees {int(cluster.get('GPU', 0))} GPUs; "
                             f"set gpus_per_trial: 0 for a CPU search or join a cluster with GPUs")
    else:
        # "All cores" is one node's cores: a trial cannot span nodes, so on a cluster the largest node's.
        node_cpus = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
        cpus = spec.resources.cpus_per_trial or max(1, int(max(node_cpus, default=cluster.get("CPU", 1))))
        concurrent = spec.resources.max_concurrent_trials or 1
    return {"cpu": cpus, "gpu": gpus}, concurrent, cpus


def _make_searcher(spec: SearchSpec, storage_url: str, study_name: str, concurrent: int, seed: int):
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if spec.sampler.kind == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # group=True, always: the baseline (study trial 0) samples no parameters, and plain
            # multivariate TPE models only the parameters *every* trial has, so that one empty
            # trial made it sample each knob independently (univariate) for the whole search.
            # The grouped search space skips it, and also covers conditional parameters.
            sampler = optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=spec.sampler.n_startup_trials, multivariate=True,
                group=True, constant_liar=concurrent > 1)
    storage = optuna.storages.RDBStorage(storage_url)
    return OptunaSearch(space=spec.define_by_run, metric="objective", mode="min", sampler=sampler,
                        study_name=study_name, storage=storage)


def _make_scheduler(spec: SearchSpec):
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

    if not spec.asha.enabled:
        return FIFOScheduler()

    class KeepBaselineASHA(ASHAScheduler):
        """ASHA that records the baseline at every rung but never stops it: the
        speed-up needs the baseline's full TTA as its reference."""

        def on_trial_result(self, tune_controller, trial, result):
            decision = super().on_trial_result(tune_controller, trial, result)
            if trial.config.get("baseline") and result.get("train_seconds", 0.0) < self._max_t:
                return TrialScheduler.CONTINUE
            return decision

    return KeepBaselineASHA(time_attr="train_seconds", metric="val_accuracy", mode="max",
                         max_t=spec.budget.max_train_seconds, grace_period=spec.asha.grace_seconds,
                         reduction_factor=spec.asha.reduction_factor)


def search_root(storage_path: str | None, name: str) -> Path:
    return Path(storage_path or "autospeed_results").expanduser().resolve() / name


def latest_search_dir(storage_path: str | None, name: str) -> Path | None:
    root = search_root(storage_path, name)
    states = sorted(root.glob(f"*/{STATE_FILE}"), key=lambda p: p.stat().st_mtime)
    return states[-1].parent if states else None


def _changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _changed_keys(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}")
    return out


def run_search(spec: SearchSpec, space_text: str, space_path: str, *, trials: int | None = None,
               tracking_uri: str | None = None, storage_path: str | None = None, ray_address: str | None = None,
               resume: bool = False, seed: int | None = None, verbose: bool = False, console=sys.stdout) -> SearchOutcome:
    """Run (or resume) a search. Returns when all trials ended or the search was interrupted."""
    from mlflow.entities import RunStatus

    wall_start = time.perf_counter()
    uri = t.resolve_tracking_uri(tracking_uri)
    client = t.connect(uri)
    name = spec.name
    seed = spec.sampler.seed if seed is None else seed
    total = trials or spec.budget.trials
    root = search_root(storage_path, name)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise RunFailure(f"--storage-path: cannot write to {root} ({e.strerror}); pick a writable folder") from None

    spec_dump = spec.model_dump(mode="json")
    state: dict[str, Any] | None = None
    if resume:
        exp_dir = latest_search_dir(storage_path, name)
        if exp_dir is None:
            raise UserError(f"--resume: no earlier search named '{name}' under {root}; run without --resume")
        state = json.loads((exp_dir / STATE_FILE).read_text())
        changed = _changed_keys(state["spec"], spec_dump)
        if changed:
            raise UserError(f"{space_path}: changed since the search started ({', '.join(changed)}); "
                            f"restore those keys to resume, or start a new search without --resume")
        if trials is not None and trials != state["trials"]:
            raise UserError(f"--trials: the search '{name}' started with {state['trials']} trials and resumes "
                            f"with that count; drop --trials, or start a new search without --resume")
        total = state["trials"]

    # Preflight: whatever can fail before training fails here, before any run is created.
    # The dataset is prepared once per search, before any trial (cached on disk).
    from autospeed.workloads import load_workload

    try:
        load_workload(spec.workload, spec.workload_options)
    except UserError as e:  # e.g. missing CIFAR-10 data: name the file that asked for it
        raise UserError(f"{space_path}: {e}") from None
    _quiet_ray()
    _start_ray(ray_address, verbose)
    resources, concurrent, threads = _resources(spec)

    if state is not None:
        search_id, parent_id = state["search_id"], state["parent_run_id"]
        client.update_run(parent_id, RunStatus.to_string(RunStatus.RUNNING))
        # The process that ran them is gone (SIGKILL, power cut): say so. A trial Tune
        # resumes reopens its own run in on_trial_start.
        _kill_leftovers(client, res.trial_rows(client, client.get_run(parent_id)))
    else:
        search_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        exp_dir = root / search_id
        exp_dir.mkdir(parents=True)
        parent = client.create_run(t.experiment_id(client, name), run_name=f"search-{search_id}",
                                   tags={t.TAG_KIND: t.KIND_SEARCH, t.TAG_SEARCH_ID: search_id,
                                         t.TAG_EXPERIMENT_DIR: str(exp_dir)})
        parent_id = parent.info.run_id
        flat = _flatten(spec_dump)
        flat["trials"] = total
        flat["sampler.seed"] = seed
        t.log_batch(client, parent_id, params={k: str(v)[:6000] for k, v in flat.items()})
        client.log_text(parent_id, space_text, Path(space_path).name)
        write_atomic(exp_dir / STATE_FILE, json.dumps({
            "search_id": search_id, "parent_run_id": parent_id, "name": name, "space_path": str(space_path),
            "spec": spec_dump, "trials": total, "seed": seed}, indent=2))

    print(f"search '{name}' ({search_id}): {total} trials of {spec.workload}, target {spec.target_accuracy}, "
          f"budget {spec.budget.max_train_seconds:g} s per trial", file=console, flush=True)

    previous_sigint = signal.getsignal(signal.SIGINT)  # Ray Tune leaves its own installed after fit()
    previous_sigterm = sigterm_as_sigint()
    try:
        from ray import tune

        experiment_id = client.get_run(parent_id).info.experiment_id
        tracker = _make_tracker(client, experiment_id, parent_id, search_id, spec, total, console,
                                exp_dir / "finished")
        trainable = tune.with_resources(
            tune.with_parameters(_trainable, spec_json=spec.model_dump_json(), threads=threads,
                                 ledger_dir=str(exp_dir / "finished")), resources)
        from ray.tune import Stopper

        stopper = type("ConsecutiveErrorStopper", (_ConsecutiveErrorStopper, Stopper), {})()
        _ACTIVE_TRACKER[:] = [tracker]

        interrupted = False
        try:
            if resume and tune.Tuner.can_restore(str(exp_dir)):
                tuner = tune.Tuner.restore(str(exp_dir), trainable=trainable, resume_unfinished=True,
                                           resume_errored=False, restart_errored=False)
                _reattach(tuner, tracker, stopper, verbose)
            else:
                searcher = _make_searcher(spec, f"sqlite:///{exp_dir / 'optuna.db'}", name, concurrent, seed)
                tuner = tune.Tuner(
                    trainable,
                    tune_config=tune.TuneConfig(search_alg=searcher, scheduler=_make_scheduler(spec),
                                                num_samples=total, max_concurrent_trials=concurrent,
                                                reuse_actors=True),
                    run_config=tune.RunConfig(name=search_id, storage_path=str(root), verbose=2 if verbose else 0,
                                              callbacks=[tracker], stop=stopper,
                                              failure_config=tune.FailureConfig(max_failures=0),
                                              checkpoint_config=tune.CheckpointConfig(num_to_keep=1)),
                )
            tuner.fit()
        except KeyboardInterrupt:
            interrupted = True
        finally:
            tracker.view.close()

        rows = res.trial_rows(client, client.get_run(parent_id))
        unfinished = len(rows) < total or any(r.status in ("running",) for r in rows)
        interrupted = interrupted or (unfinished and tracker.stop_reason is None)
        _finish_parent(client, parent_id, rows, interrupted, tracker.stop_reason)
    except BaseException as e:
        # A crash or an interrupt outside tuner.fit(): leave no run claiming to be RUNNING.
        killed = isinstance(e, KeyboardInterrupt)
        _finish_parent(client, parent_id, res.trial_rows(client, client.get_run(parent_id)), killed,
                       None if killed else f"{type(e).__name__}: {str(e).strip()[:300]}")
        raise
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
            signal.signal(signal.SIGINT, previous_sigint)  # Ctrl-C after the search (confirmation) interrupts
    return SearchOutcome(name, search_id, parent_id, exp_dir, rows, interrupted, tracker.stop_reason,
                         time.perf_counter() - wall_start)


def _reattach(tuner, tracker, stopper, verbose: bool) -> None:
    """A restored Tuner keeps its pickled callbacks; point it at this process's tracker."""
    run_config = tuner._local_tuner._run_config
    run_config.callbacks = [tracker]
    run_config.stop = stopper
    run_config.verbose = 2 if verbose else 0


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and prefix.count(".") < 1 and k != "workload_options":
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, (dict, list)) else v
    return out


def sigterm_as_sigint():
    """Make SIGTERM (`kill`, a scheduler's stop) end a search the way Ctrl-C does.

    Inside tuner.fit() Ray Tune's own SIGINT handler stops the trials, saves the
    experiment and returns; elsewhere SIGINT raises KeyboardInterrupt. SIGTERM calls
    whichever SIGINT handler is current. Returns the previous handler (None when
    not on the main thread, where signals cannot be set).
    """

    def forward(signum, frame):
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, forward)
    except ValueError:
        return None


def _kill_leftovers(client, rows: list[res.TrialRow]) -> None:
    """Child runs left RUNNING (a killed trial) are marked KILLED, never left lying."""
    for r in rows:
        if r.status == "running":
            t.mark_killed(client, r.run_id)
            r.status = "killed"


def _finish_parent(client, parent_id: str, rows: list[res.TrialRow], interrupted: bool,
                   stop_reason: str | None) -> None:
    from mlflow.entities import RunStatus

    _kill_leftovers(client, rows)
    summary = res.summary_metrics(rows)
    t.log_batch(client, parent_id, t.metrics({k: v for k, v in summary.items() if v is not None}))
    client.log_text(parent_id, res.leaderboard_csv(rows), "leaderboard.csv")
    if stop_reason:
        client.set_tag(parent_id, t.TAG_ERROR, stop_reason[:500])
    status = RunStatus.KILLED if interrupted else RunStatus.FAILED if stop_reason else RunStatus.FINISHED
    client.set_terminated(parent_id, RunStatus.to_string(status))
