"""How the best LR and batch size move as trials grow longer, read off ASHA's rungs (docs/design.md "Long jobs";
issue 43): "short trials preferred lr x; at the job's length the trend says y", a prediction, said so.

The best LR falls as training gets longer (Bjorck et al. 2025), so the short trials of a long job prefer too high
an LR. An ASHA search trains its trials to several horizons (its rungs: grace, grace x eta, ... up to the trials'
budget), so it sees the best recipe at each: at each rung, the leader is the trial best at that horizon among those
that trained that long (the metric at the first evaluation at or past the rung, as ASHA compares them; a trial that
reached the target by then leads by its TTA). A rung that fewer than two trials reached has no leader. The trend of
each searched numeric knob (lr, batch_size) is a least-squares line of log(value) on log(horizon) over the rungs'
leaders, extrapolated to the job's length: the confirmed winner's median TTA, else the baseline's given TTA. Two
rungs at least; an LR compares only between trials of one optimizer (the last rung's leader's).

It ranks nothing (experiments/results/long_job_bench.md: ranking by the LR trend missed more often than the metric
at each trial's last horizon); it tells the user where the knob is heading, to weigh before a 50-hour run.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from autospeed.search.session import SearchSession
    from autospeed.space import SearchSpec

TRENDED = ("lr", "batch_size")  # the numeric knobs whose best value moves with the training's length
MIN_TRIALS_AT_RUNG = 2  # a rung one trial reached has no leader: nothing was compared there


@dataclass(frozen=True)
class Trial:
    """What the trend needs of one trial: its knobs (as the run records them), its curve and its TTA."""

    name: str
    knobs: dict[str, str]
    curve: Sequence[tuple[float, float]]  # (train seconds, metric), in order
    tta_seconds: float | None = None


@dataclass
class Trend:
    rungs: list[dict] = field(default_factory=list)  # {seconds, trials, leader, knob: value...} per rung with a leader
    knobs: dict[str, dict] = field(default_factory=dict)  # knob -> {slope, at_job (a prediction), over}
    job_seconds: float | None = None
    job_what: str = ""
    optimizer: str | None = None  # the LR's trials' optimizer, where the space searches it

    def record(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def lines(self) -> list[str]:
        """The printed block: one line per trended knob, its rungs' values and, with a job length, the trend's."""
        head = ("horizon trend (each ASHA rung's leader among the trials that trained that long; "
                + ", ".join(f"{r['seconds']:g} s: {r['trials']} trials" for r in self.rungs) + ")")
        out = [head]
        for knob, t in self.knobs.items():
            values = ", ".join(f"{_fmt(r[knob])} at {r['seconds']:g} s" for r in self.rungs if knob in r)
            only = f" ({self.optimizer} trials)" if knob == "lr" and self.optimizer else ""
            said = f"  {knob}{only}: short trials preferred {values}"
            if t["slope"] == 0:
                same = next(r[knob] for r in self.rungs if knob in r)
                said = f"  {knob}{only}: {_fmt(same)} at every rung (no trend)"
            elif t.get("at_job") is not None:
                said += (f"; at the job's length, {self.job_seconds:.2f} s ({self.job_what}), the trend says "
                         f"~{_fmt(t['at_job'])} (a prediction from {t['over']} rungs, not measured)")
            out.append(said)
        return out


def rungs_of(grace_seconds: float, reduction_factor: float, max_seconds: float) -> list[float]:
    """ASHA's milestones on the train clock: grace x eta^k up to the trials' budget."""
    out, h = [], grace_seconds
    while h <= max_seconds * (1 + 1e-9):
        out.append(h)
        h *= reduction_factor
    return out


def _score(t: Trial, horizon: float, mode: str) -> tuple | None:
    """How good `t` was at `horizon` (higher is better), None when it did not train that long."""
    if t.tta_seconds is not None and t.tta_seconds <= horizon:
        return (1, -t.tta_seconds)
    at = next((v for s, v in t.curve if s >= horizon * (1 - 1e-9)), None)
    if at is None:
        return None
    return (0, at if mode == "max" else -at)


def _value(t: Trial, knob: str) -> float | None:
    try:
        v = float(t.knobs[knob])
    except (KeyError, ValueError):
        return None
    return v if v > 0 else None


def _leader(trials: Sequence[Trial], horizon: float, mode: str) -> tuple[int, Trial | None]:
    """(how many of `trials` trained to `horizon`, the best of them there)."""
    scored = [(s, t) for t in trials if (s := _score(t, horizon, mode)) is not None]
    return len(scored), (max(scored, key=lambda x: x[0])[1] if scored else None)


def trend(trials: Sequence[Trial], rungs: Sequence[float], mode: str, knobs: Sequence[str],
          job_seconds: float | None = None, job_what: str = "") -> Trend | None:
    """The rungs' leaders and each knob's trend over them; None when fewer than two rungs have a leader."""
    leaders = [(h, n, leader) for h in rungs for n, leader in [_leader(trials, h, mode)] if n >= MIN_TRIALS_AT_RUNG]
    if len(leaders) < 2:
        return None
    out = Trend(job_seconds=job_seconds, job_what=job_what)
    if "lr" in knobs and len({t.knobs.get("optimizer") for t in trials}) > 1:  # AdamW's LR and SGD's: not one scale
        out.optimizer = leaders[-1][2].knobs.get("optimizer")
    out.rungs = [{"seconds": h, "trials": n, "leader": leader.name} for h, n, leader in leaders]
    for knob in knobs:
        points = []
        for (h, _, leader), row in zip(leaders, out.rungs):
            if knob == "lr" and out.optimizer is not None:  # this optimizer's best at the rung, where it ran one
                leader = _leader([t for t in trials if t.knobs.get("optimizer") == out.optimizer], h, mode)[1]
            v = _value(leader, knob) if leader is not None else None
            if v is not None:
                row[knob] = v
                points.append((h, v))
        if len(points) < 2:
            continue
        said = {"slope": 0.0, "over": len(points), "at_job": None}  # one value at every rung: no trend
        if len({v for _, v in points}) > 1:
            slope, intercept = np.polyfit(np.log([h for h, _ in points]), np.log([v for _, v in points]), 1)
            said["slope"] = float(slope)
            if job_seconds:
                said["at_job"] = math.exp(intercept + slope * math.log(job_seconds))
        out.knobs[knob] = said
    return out if out.knobs else None


def _fmt(v: float) -> str:
    return f"{v:.0f}" if v >= 10 else f"{v:.3g}"


def report(spec: SearchSpec, session: SearchSession, rows: list) -> Trend | None:
    """After confirmation: the trend of the search's trials (`rows`, runs.TrialRow), printed and recorded on the
    parent (tag autospeed.horizon_trend, JSON); nothing without ASHA or a searched lr / batch_size."""
    from autospeed.track import names
    from autospeed.track.store import interrupts_held
    from autospeed.track.trajectory import curve_of

    knobs = [k for k in TRENDED if k in spec.space]
    if not spec.asha.enabled or not knobs:
        return None
    client, target = session.client, spec.resolved_target
    m = client.get_run(session.parent_id).data.metrics
    job, what = ((m[names.M_CONFIRM_MEDIAN], "the confirmed winner's median TTA") if m.get(names.M_CONFIRM_MEDIAN)
                 else (spec.confirm.baseline_tta_seconds, "the baseline's given TTA"))
    trials = [Trial(r.trial_id, r.params, curve_of(client, r.run_id, target.metric), r.tta_seconds)
              for r in rows if r.kind == names.KIND_TRIAL and r.duplicate_of is None]
    found = trend(trials, rungs_of(spec.asha.grace_seconds, spec.asha.reduction_factor,
                                   spec.budget.max_train_seconds), target.mode, knobs, job, what)
    if found is None:
        return None
    print("\n" + "\n".join(found.lines()), file=session.console, flush=True)
    with interrupts_held():
        client.set_tag(session.parent_id, names.TAG_HORIZON_TREND, found.record())
    return found
