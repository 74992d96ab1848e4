"""The probe stage's plan and decision (search/probe.py runs it): which systems configurations and maths
it times, and what it fixes from the timings. Pure functions over Probe records: no torch, Ray or MLflow.

The decision, in short: a configuration's speed is the geometric mean, over maths combinations, batch
sizes and timing rounds, of its samples/s relative to the base configuration's in the same round; the
noise is the base's own spread across those rounds (per maths and batch size, its fastest timing /
its slowest - 1; the median of those); a configuration other than the base wins only when
speed - 1 > noise.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from autospeed.search.neutrality import Neutrality, predicted_tta_ratio
from autospeed.space import Param, SearchSpec
from autospeed.train.applied import Applied

MATHS_NEUTRAL = ("compile", "channels_last", "cudnn_benchmark", "data_loader", "num_workers", "pin_memory",
                 "persistent_workers", "prefetch_factor", "optimizer_impl", "attention")
STEP_COST_MATHS = ("optimizer", "precision")  # maths knobs that change a step's cost: probed under each value
_PROBE_SETS = ("batch_size", "accumulation_steps", "micro_batch_size", "workers")  # the probe's own, not maths
OK, OOM, FAILED = "ok", "oom", "failed"  # a probe's status (autospeed.status of its run)


@dataclass
class Probe:
    """One systems configuration under one maths combination at one batch size, in one timing round."""

    config: dict[str, Any]
    batch_size: int
    status: str  # ok, oom or failed
    samples_per_second: float | None = None  # steady state: over the last `steps` steps, train clock
    compile_seconds: float | None = None  # the first step's seconds with a compile mode, else 0
    peak_memory_mb: float | None = None
    error: str | None = None
    maths: dict[str, Any] = field(default_factory=dict)  # the maths knobs it trained with (maths_combinations)
    round: int = 0  # its timing round
    applied: Applied = field(default_factory=dict)  # the trainer's `applied` for its config and maths


@dataclass
class Verdict:
    """A configuration against the default (the base configuration), timed in the same rounds."""

    speed: float  # geometric mean of samples/s relative to the base's, over maths, batch sizes and rounds
    noise: float  # the base's spread across those rounds (base_noise); inf when unmeasured

    @property
    def faster(self) -> bool:
        """Faster than the default by more than the timing's noise."""
        return self.speed - 1.0 > self.noise


@dataclass
class Decision:
    """What the probe fixed, why, and the narrowed space the trials search."""

    fixed: dict[str, Any]  # maths-neutral knob -> value (its only choice in the narrowed space)
    micro_batch_size: int | str | None  # for batch sizes that do not fit; None: every batch size fits
    spec: SearchSpec
    probes: list[Probe] = field(default_factory=list)
    default: dict[str, Any] = field(default_factory=dict)  # the base configuration
    challenger: dict[str, Any] | None = None  # the fastest eligible configuration other than the default
    verdict: Verdict | None = None  # the challenger's, against the default
    configs: list[dict[str, Any]] = field(default_factory=list)  # every configuration probed, base first
    # the maths-neutrality check of each configuration's change from the base (empty: not asked for), and the
    # knobs a failed check left to the trials (never fixed by the probe)
    neutrality: list[Neutrality] = field(default_factory=list)
    maths_knobs: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        """The fixed configuration's speed relative to the default's (1.0 when the default is kept)."""
        return self.verdict.speed if self.fixed != self.default and self.verdict else 1.0

    def margin(self) -> str:
        """Why: the fixed configuration's speed-up beyond the noise, or why the default was kept."""
        v = self.verdict
        if len(self.configs) == 1:
            return "one configuration: nothing to compare"
        if v is None:
            return "kept default: no other configuration eligible"
        noise = noise_text(v.noise)
        if self.fixed != self.default:
            return f"{v.speed:.2f}x the default, faster by {v.speed - 1:.1%} > noise {noise}"
        how = "within noise" if v.speed > 1.0 else "not faster; noise"
        return f"kept default: {_knobs(self.challenger)} {v.speed:.2f}x {how} {noise}"

    def describe(self) -> str:
        knobs = _knobs(self.fixed) if self.fixed else "nothing to fix"
        micro = f"; micro_batch_size {self.micro_batch_size} for the batch sizes that do not fit" \
            if self.micro_batch_size is not None else ""
        why = f" ({self.margin()})" if len(self.configs) != 1 else ""
        return f"probe fixed: {knobs}{micro}{why}{self.neutrality_text()}"

    def predicted_tta_ratio(self) -> tuple[float, float, float] | None:
        """The fixed configuration's TTA over the default's, predicted from throughput (1/speed, and the interval
        the timing noise gives): only for a change the neutrality check found neutral, None otherwise."""
        if not self.neutrality or self.verdict is None or self.fixed == self.default:
            return None
        return predicted_tta_ratio(self.verdict.speed, self.verdict.noise)

    def neutrality_text(self) -> str:
        """The check's outcome in the decision line: what was left to the trials, the fixed change's prediction."""
        if not self.neutrality:
            return ""
        text = ""
        if self.maths_knobs:
            text += f"; left to the trials, maths knobs here: {', '.join(self.maths_knobs)}"
        ratio = self.predicted_tta_ratio()
        if ratio is not None:
            mid, low, high = ratio
            text += (f"; maths-neutral, so its TTA is predicted at ~{mid:.2f}x the default's [{low:.2f}-{high:.2f}] "
                     f"(throughput ratio and its noise; no curve extrapolated)")
        return text

    def neutrality_record(self) -> dict[str, Any]:
        """The parent run's tag autospeed.probe_neutrality: each change's check, the knobs left to the trials and
        the fixed configuration's predicted TTA ratio."""
        ratio = self.predicted_tta_ratio()
        return {"checks": {c.label: c.record() for c in self.neutrality}, "maths_knobs": self.maths_knobs,
                "predicted_tta_ratio": None if ratio is None else
                {"ratio": round(ratio[0], 4), "low": round(ratio[1], 4), "high": round(ratio[2], 4)}}


def noise_text(noise: float) -> str:
    return "unmeasured" if math.isinf(noise) else f"{noise:.1%}"


def _knobs(config: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (config or {}).items())


# ---------------------------------------------------------------- what to probe
def wants_probe(spec: SearchSpec) -> bool:
    """The probe runs when it is on and has something to decide: a systems knob or batch sizes to try."""
    return spec.probe.enabled and (bool(systems_knobs(spec)) or "batch_size" in spec.space)


def systems_knobs(spec: SearchSpec) -> dict[str, list[Any]]:
    """The space's maths-neutral knobs and their values (a range: its two ends)."""
    return {k: list(p.edge_values()) for k, p in spec.space.items() if k in MATHS_NEUTRAL}


def batch_sizes(spec: SearchSpec) -> list[int]:
    p = spec.space.get("batch_size")
    if p is None:
        return [spec.recipe_for({}).batch_size]
    if p.choice is not None:
        return sorted(set(p.choice))
    return sorted(set(p.edge_values()))


def _offered(p: Param, value: Any) -> bool:
    if p.choice is not None:
        return value in p.choice
    low, high = p.edge_values()
    return isinstance(value, (int, float)) and low <= value <= high


def maths_combinations(spec: SearchSpec) -> list[dict[str, Any]]:
    """The maths the probe times each configuration under: every combination of the space's values of
    STEP_COST_MATHS (optimizer x precision), each other maths knob of the space at the baseline's value
    where the space offers it, else its first. One combination when the space varies neither."""
    baseline = spec.recipe_for({}, baseline=True)
    others = {k: getattr(baseline, k) if _offered(p, getattr(baseline, k)) else p.edge_values()[0]
              for k, p in spec.space.items() if k not in (*MATHS_NEUTRAL, *_PROBE_SETS, *STEP_COST_MATHS)}
    varied = {k: spec.space[k].edge_values() for k in STEP_COST_MATHS if k in spec.space}
    return [{**others, **dict(zip(varied, values))} for values in itertools.product(*varied.values())]


def maths_label(maths: dict[str, Any]) -> str:
    """The varied maths of a combination ("optimizer=adamw precision=bf16"), as the output shows it."""
    return " ".join(f"{k}={maths[k]}" for k in STEP_COST_MATHS if k in maths)


def _active(spec: SearchSpec, config: dict[str, Any]) -> dict[str, Any]:
    """The config without knobs whose `when` condition it does not meet (they would not be sampled)."""
    out = {}
    for k, v in config.items():
        when = spec.space[k].when or {}
        if all(config.get(parent) in allowed for parent, allowed in when.items()):
            out[k] = v
    return out


def configurations(spec: SearchSpec, max_configs: int) -> list[dict[str, Any]]:
    """The base configuration, then one knob at a time (up to max_configs - 1 in all, a slot kept for
    the combination of winners, which search/probe.py's `probe_stage` adds once the singles are measured)."""
    knobs = systems_knobs(spec)
    baseline = spec.recipe_for({}, baseline=True)
    base = {k: getattr(baseline, k) if getattr(baseline, k) in values else values[0] for k, values in knobs.items()}
    configs = [_active(spec, base)]
    for knob, values in knobs.items():
        for v in values:
            moved = {**base, knob: v}
            for parent, allowed in (spec.space[knob].when or {}).items():  # make its condition true
                if moved.get(parent) not in allowed:
                    moved[parent] = allowed[0]
            moved = _active(spec, moved)
            if moved not in configs:
                configs.append(moved)
    return configs[:max(1, max_configs - 1)]


# ---------------------------------------------------------------- deciding
def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


Cells = dict[tuple[str, int], dict[int, Probe]]  # (maths key, batch size) -> round -> probe


def timings(probes: list[Probe]) -> dict[str, Cells]:
    """config key -> (maths key, batch size) -> round -> probe."""
    out: dict[str, Cells] = {}
    for p in probes:
        out.setdefault(_key(p.config), {}).setdefault((_key(p.maths), p.batch_size), {})[p.round] = p
    return out


def _ok(p: Probe | None) -> bool:
    return p is not None and p.status == OK and bool(p.samples_per_second)


def base_noise(base: Cells, rounds: list[int]) -> float:
    """The base's spread across `rounds`: in each cell (maths, batch size) it fits in every round, its
    fastest timing / its slowest - 1; the median over those cells. A cell's spread holds the noise of one
    timing and the machine's drift between rounds alike; the median is not moved by one disturbed cell.
    inf with fewer than two rounds: noise unmeasured."""
    cells = [per for per in base.values() if all(_ok(per.get(r)) for r in rounds)]
    if len(rounds) < 2 or not cells:
        return math.inf
    return statistics.median(max(per[r].samples_per_second for r in rounds)
                             / min(per[r].samples_per_second for r in rounds) - 1.0 for per in cells)


def verdict(mine: Cells, base: Cells) -> Verdict | None:
    """Speed relative to the base (geometric mean over cells and rounds, each against the base in the same
    round) and the base's noise over those rounds; None when this configuration is not eligible (it fails
    or runs out of memory in a cell and round where the base fits)."""
    rounds = sorted({r for per in mine.values() for r in per})
    logs = []
    for cell, ref in base.items():
        for r in rounds:
            if not _ok(ref.get(r)):
                continue
            p = mine.get(cell, {}).get(r)
            if not _ok(p):
                return None
            logs.append(math.log(p.samples_per_second / ref[r].samples_per_second))
    return Verdict(math.exp(statistics.fmean(logs)), base_noise(base, rounds)) if logs else None


def cold_compile_seconds(per: dict[int, Probe]) -> float | None:
    """One cell's (maths, batch size) compile seconds as a new process on a new machine pays them: its first
    timing round's, the compile that found none of these graphs in inductor's on-disk cache. Later rounds find
    what the first left there (on CPU 1.4 s against 13.4 s, experiments/results/cold_start_cache_cpu.md), as
    would a trial and a production run on this machine, but not one elsewhere. None when that round failed."""
    first = per[min(per)] if per else None
    return first.compile_seconds if first is not None and first.status == OK else None


def repaid(config: dict[str, Any], cells: Cells, speed: float, budget_seconds: float) -> bool:
    """A compile mode pays for itself when its cold compile seconds (cold_compile_seconds, the mean over cells)
    are below what its faster steps save in a run of the whole budget: budget x (1 - 1/speed). Eager
    configurations always qualify."""
    if config.get("compile", "none") == "none":
        return True
    compile_seconds = [s for s in map(cold_compile_seconds, cells.values()) if s is not None]
    if not compile_seconds:
        return False
    return statistics.fmean(compile_seconds) < budget_seconds * (1.0 - 1.0 / speed)


def fastest(configs: list[dict[str, Any]], probes: list[Probe],
            budget_seconds: float) -> tuple[dict[str, Any], dict[str, Any] | None, Verdict | None]:
    """(the winner, the fastest eligible configuration other than the base, its verdict). The winner is that
    challenger when it is faster than the base by more than the noise, else the base (configs[0])."""
    by_config = timings(probes)
    base = by_config[_key(configs[0])]
    best, best_verdict = None, None
    for c in configs[1:]:
        mine = by_config.get(_key(c))
        v = verdict(mine, base) if mine else None
        if (v is not None and repaid(c, mine, v.speed, budget_seconds)
                and (best is None or v.speed > best_verdict.speed)):
            best, best_verdict = c, v
    winner = best if best_verdict is not None and best_verdict.faster else configs[0]
    return winner, best, best_verdict


def combination(spec: SearchSpec, configs: list[dict[str, Any]], probes: list[Probe],
                budget_seconds: float) -> dict[str, Any]:
    """The base with each knob at its winning one-at-a-time value."""
    base = configs[0]
    combined = dict(base)
    for knob in systems_knobs(spec):
        moved = [c for c in configs[1:] if c.get(knob) != base.get(knob)]
        winner = fastest([base, *moved], probes, budget_seconds)[0]
        for k in (knob, *(spec.space[knob].when or {})):
            if k in winner:
                combined[k] = winner[k]
    return _active(spec, combined)


def summary(cells: Cells) -> list[Probe]:
    """Per (maths, batch size) of one configuration: one Probe for all its rounds (median samples/s, the first
    round's cold compile seconds, largest peak memory; the first bad status where any round was not ok)."""
    out = []
    for per in cells.values():
        rounds = [per[r] for r in sorted(per)]
        bad = next((p for p in rounds if p.status != OK), None)
        first = rounds[0]
        p = Probe(first.config, first.batch_size, bad.status if bad else OK, maths=first.maths, round=first.round,
                  applied=first.applied, error=bad.error if bad else None)
        if bad is None:
            p.samples_per_second = statistics.median(q.samples_per_second for q in rounds)
            p.compile_seconds = cold_compile_seconds(per) or 0.0
            p.peak_memory_mb = max((q.peak_memory_mb for q in rounds if q.peak_memory_mb is not None), default=None)
        out.append(p)
    return out


def micro_batch_for(probes: dict[int, Probe]) -> int | str | None:
    """The micro-batch for batch sizes that do not fit: the largest that fits and divides all of them."""
    fit = sorted(b for b, p in probes.items() if p.status == OK)
    too_big = [b for b, p in probes.items() if p.status == OOM]
    if not too_big:
        return None
    dividing = [m for m in fit if all(b % m == 0 for b in too_big)]
    return dividing[-1] if dividing else "auto"


def by_batch(cells: Cells) -> dict[int, Probe]:
    """Batch size -> a probe of it (for micro_batch_for): an out-of-memory one where any maths or round ran
    out of memory."""
    out: dict[int, Probe] = {}
    for p in summary(cells):
        if p.batch_size not in out or p.status == OOM:
            out[p.batch_size] = p
    return out


def narrowed(spec: SearchSpec, winner: dict[str, Any], micro_batch_size: int | str | None,
             maths_knobs: list[str] | tuple[str, ...] = ()) -> SearchSpec:
    """The space with each maths-neutral knob at its winning value (a knob whose condition the winner does
    not meet dropped) and, where some batch size does not fit, micro_batch_size at the probe's. `maths_knobs`
    (the neutrality check found them changing the maths) stay searched by the trials."""
    space: dict[str, Param] = {}
    for k, p in spec.space.items():
        if k not in MATHS_NEUTRAL or k in maths_knobs:
            space[k] = p
        elif k in winner:
            space[k] = p.model_copy(update={"choice": [winner[k]], "uniform": None, "loguniform": None,
                                            "int_": None})
    user_set = "micro_batch_size" in spec.space or "micro_batch_size" in spec.fixed
    if micro_batch_size is not None and not user_set:
        space["micro_batch_size"] = Param(choice=[micro_batch_size])
    return spec.model_copy(update={"space": space})


