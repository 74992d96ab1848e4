"""The report's data: one search read back from MLflow, and its Optuna study from disk."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autospeed.outcome import median_tta
from autospeed.predict import predict_tta
from autospeed.recipe import ACCURACY, Target, target_from
from autospeed.track import names
from autospeed.track import runs as res


@dataclass
class Curve:
    train_seconds: list[float]
    values: list[float]  # of the search's target metric


@dataclass
class Extrapolation:
    """A predicted trial's curve carried on to its predicted TTA: the logged prediction (what ranked the trial)
    and the best fit of predict_tta refitted on the logged curve, from its last evaluation to that TTA."""

    seconds: float  # the predicted TTA as the trial logged it
    low_seconds: float | None  # its 80% interval
    high_seconds: float | None
    train_seconds: list[float]  # the extrapolated curve, from the last evaluation to `seconds`
    values: list[float]


EXTRAPOLATION_POINTS = 60


def extrapolation(row: res.TrialRow, c: Curve) -> Extrapolation | None:
    """None unless the row's TTA is predicted and its curve was logged. The refit uses predict_tta's defaults
    and the row's target; where it keeps no fit, the line runs straight from the last point to the target."""
    if not row.predicted or not c.train_seconds:
        return None
    target = row.target
    last, end = c.train_seconds[-1], max(row.tta_predicted_seconds, c.train_seconds[-1])
    xs = [last + (end - last) * i / (EXTRAPOLATION_POINTS - 1) for i in range(EXTRAPOLATION_POINTS)]
    fit = predict_tta(c.train_seconds, c.values, target.value, target.mode)
    ys = fit.curve(xs) if fit.fit is not None else [math.nan]
    if not all(math.isfinite(y) for y in ys):
        xs, ys = [last, end], [c.values[-1], target.value]
    return Extrapolation(row.tta_predicted_seconds, row.tta_predicted_low_seconds, row.tta_predicted_high_seconds,
                         xs, [float(y) for y in ys])


@dataclass
class Confirmed:
    """One recipe's confirmation runs: TTAs in train-clock seconds, None where the target was missed."""

    label: str
    baseline: bool
    ttas: list[float | None]

    @property
    def reached(self) -> list[float]:
        return [x for x in self.ttas if x is not None]

    @property
    def median(self) -> float | None:  # a miss counts as infinitely slow, as in autospeed.confirm
        return median_tta(self.ttas)


@dataclass
class ProbeRow:
    """One probe run: a systems configuration at one batch size."""

    config: str  # its systems knobs, "k=v k=v"
    batch_size: int
    samples_per_second: float | None
    oom: bool


def probe_rows(children: list) -> list[ProbeRow]:
    rows = []
    for run in children:
        if run.data.tags.get(names.TAG_KIND) != names.KIND_PROBE:
            continue
        params = run.data.params
        config = " ".join(f"{k}={v}" for k, v in sorted(params.items()) if k != "batch_size") or "baseline"
        rows.append(ProbeRow(config, int(params.get("batch_size", 0)),
                             run.data.metrics.get(names.M_SAMPLES_PER_SECOND),
                             run.data.metrics.get(names.M_OOM) == 1.0))
    return sorted(rows, key=lambda r: (r.config, r.batch_size))


@dataclass
class SearchData:
    name: str
    search_id: str
    parent: Any
    rows: list[res.TrialRow]
    curves: dict[str, Curve]
    confirmed: list[Confirmed]
    target: float | None  # the target metric's value that counts as trained
    max_train_seconds: float | None
    importances: dict[str, float] | None
    environment: dict[str, str]
    run_names: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    target_metric: str = ACCURACY
    target_mode: str = "max"
    probes: list[ProbeRow] = field(default_factory=list)
    probe_fixed: str | None = None  # what the probe fixed (the parent's tag, JSON)
    ablation: dict[str, dict[str, Any]] = field(default_factory=dict)  # knob -> search/ablation.py's record
    extrapolations: dict[str, Extrapolation] = field(default_factory=dict)  # run id -> a predicted trial's

    @property
    def predicted(self) -> bool:
        """Some trial's TTA is a prediction (a search with `predict`): the report marks and draws them."""
        return any(r.predicted for r in self.rows)

    @property
    def metric_label(self) -> str:
        """The target metric as an axis reads it, with its direction."""
        if self.target_metric == ACCURACY:
            return "validation accuracy"
        return f"{self.target_metric} ({'lower' if self.target_mode == 'min' else 'higher'} is better)"

    def label(self, row: res.TrialRow) -> str:
        """The trial's MLflow run name (what the MLflow UI lists), else its short trial id."""
        return self.run_names.get(row.run_id) or ("baseline" if row.baseline else row.trial_id.rsplit("_", 1)[-1])

    @property
    def winner(self) -> res.TrialRow | None:
        order = res.ranked(self.rows)
        return order[0] if order and order[0].reached else None

    @property
    def baseline(self) -> res.TrialRow | None:
        return res.baseline_of(self.rows)




def _last_attempt(history: list) -> list:
    """The metric values of a run's last attempt. A trial resumed after its search was
    killed trains again from the start in the same MLflow run (MLflow cannot delete
    metrics), so its history holds the killed attempt too: steps go back to the start
    where the new attempt begins."""
    ms = sorted(history, key=lambda m: (m.timestamp, m.step))
    start = 0
    for i in range(1, len(ms)):
        if ms[i].step <= ms[i - 1].step:
            start = i
    return ms[start:]


def curve(client, run_id: str, metric: str = ACCURACY) -> Curve:
    """`metric` against train_seconds, aligned by step (both are logged at each evaluation's
    step), of the run's last attempt."""
    acc = {m.step: m.value for m in _last_attempt(client.get_metric_history(run_id, metric))}
    secs = {m.step: m.value for m in _last_attempt(client.get_metric_history(run_id, names.M_TRAIN_SECONDS))}
    steps = sorted(set(acc) & set(secs))
    return Curve([secs[s] for s in steps], [acc[s] for s in steps])


def experiment_dir(parent, searches: Path | None, search_id: str) -> Path | None:
    """Where the search kept its Ray experiment and optuna.db: under `searches` (the folder of every
    search of this name, when --storage-path names one: a store moved since), else as recorded on
    the parent run (None if it recorded none)."""
    if searches is not None:
        return searches / search_id
    recorded = parent.data.tags.get(names.TAG_EXPERIMENT_DIR)
    return Path(recorded) if recorded else None


def importances(path: Path, study_name: str) -> tuple[dict[str, float] | None, str | None]:
    """(Optuna's parameter importances for the objective, None) or (None, why not)."""
    if not path.exists():
        return None, (f"Optuna study not found at {path}; parameter importances are left out "
                      f"(pass --storage-path where the search ran)")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{path}")
        # PED-ANOVA, not fANOVA: fANOVA only weighs knobs every trial has, and the baseline trial
        # and conditional knobs (`when:`) leave that set empty.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            imp = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    except Exception as e:  # too few complete trials, a single-valued space, another study name
        return None, f"parameter importances unavailable ({str(e).splitlines()[0][:200]})"
    if not imp:
        return None, "parameter importances unavailable (no knob varied across the study's complete trials)"
    few = any("less than 2 trials" in str(w.message) for w in caught)
    return dict(imp), ("parameter importances rest on few trials per value range; read them as a hint" if few else None)


def _search_target(rows: list[res.TrialRow], parent) -> Target:
    """The search's target: from its trials' recipe params, else the parent's (space file) params."""
    for r in rows:
        if r.params.get("target") or r.params.get("target_accuracy"):
            return r.target
    p = parent.data.params
    if p.get("target.metric"):
        return Target(metric=p["target.metric"], mode=p["target.mode"], value=float(p["target.value"]))
    accuracy = p.get("target_accuracy")
    return target_from(None, float(accuracy) if accuracy not in (None, "", "None") else None)


def _float_param(rows: list[res.TrialRow], parent, key: str, parent_key: str) -> float | None:
    for value in [parent.data.params.get(parent_key), *(r.params.get(key) for r in rows)]:
        try:
            return float(value)
        except (TypeError, ValueError):
            continue
    return None


def collect(client, name: str, searches: Path | None = None) -> SearchData:
    """Search `name` read back; `searches`: where its folders are, if not where the parent run recorded."""
    parent = res.find_parent(client, name)
    search_id = parent.data.tags.get(names.TAG_SEARCH_ID, "")
    children = res.child_runs(client, parent)
    rows = res.trial_rows(client, parent, runs=children)
    run_names = {run.info.run_id: run.info.run_name for run in children}
    target = _search_target(rows, parent)
    curves = {r.run_id: curve(client, r.run_id, target.metric) for r in rows}
    extrapolations = {r.run_id: x for r in rows if (x := extrapolation(r, curves[r.run_id])) is not None}
    by_recipe: dict[tuple[str, bool], list[float | None]] = {}
    # An extended search confirmed again: only the latest confirmation's runs count.
    latest = parent.data.metrics.get(names.M_CONFIRM_TRIALS)
    confirms = [run for run in children if latest is None
                or run.data.tags.get(names.TAG_CONFIRM_TRIALS) == str(int(latest))]
    base = res.baseline_of(rows)  # its trial is its first confirmation sample when confirm.py carried it
    if base is not None and parent.data.tags.get(names.TAG_CONFIRM_CARRIED) == base.trial_id:
        by_recipe[(base.trial_id, True)] = [base.tta_seconds if base.reached else None]
    for r in res.trial_rows(client, parent, kind=names.KIND_CONFIRM, runs=confirms):
        by_recipe.setdefault((r.trial_id, r.baseline), []).append(r.tta_seconds if r.reached else None)
    trial_names = {r.trial_id: run_names.get(r.run_id) for r in rows}  # the UI names confirm runs by trial id
    confirmed = [Confirmed("baseline" if b else f"{trial_names.get(tid) or 'trial'} ({tid})", b, ttas)
                 for (tid, b), ttas in by_recipe.items()]
    confirmed.sort(key=lambda c: c.median if c.median is not None else math.inf)
    folder = experiment_dir(parent, searches, search_id)
    imp, why = (importances(folder / "optuna.db", name) if folder is not None else
                (None, "the search run records no experiment folder; pass --storage-path to find its Optuna "
                       "study (parameter importances are left out)"))
    env: dict[str, str] = {}
    tags = {run.info.run_id: run.data.tags for run in children}
    for r in res.ranked(rows):  # the environment of the best trial that recorded one
        run_tags = tags[r.run_id]
        env = {k.removeprefix("autospeed.env."): v for k, v in run_tags.items() if k.startswith("autospeed.env.")}
        if env:
            break
    return SearchData(
        name=name, search_id=search_id, parent=parent, rows=rows, curves=curves, confirmed=confirmed,
        target=target.value, target_metric=target.metric, target_mode=target.mode,
        max_train_seconds=_float_param(rows, parent, "max_train_seconds", "budget.max_train_seconds"),
        importances=imp, environment=env, run_names=run_names, notes=[why] if why else [],
        probes=probe_rows(children), probe_fixed=parent.data.tags.get(names.TAG_PROBE_FIXED),
        ablation=json.loads(parent.data.tags.get(names.TAG_ABLATION) or "{}"), extrapolations=extrapolations)


