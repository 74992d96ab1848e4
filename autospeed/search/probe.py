"""The probe stage (DESIGN.md "Probe stage"): time the systems knobs before the trials, then fix them.

Knobs that do not change the maths (MATHS_NEUTRAL) change TTA only through speed, so a few
timed steps decide them instead of whole trials. Each systems configuration is trained for
`warmup_steps + steps` optimizer steps at every batch size of the space (micro-batch =
batch, no accumulation) and measured: steady-state samples/s over the last `steps` (train
clock), compile seconds (the first step's, with a compile mode), peak memory, out-of-memory.
Evaluation runs after every step on a tiny validation set, only to read the clock there; each
worker first runs one untimed probe, so the first configuration does not pay its start-up.

Which configurations (at most `max_configs`): the base configuration (the baseline's value of
each knob where the space offers it, else the space's first), then one knob at a time moved
to each of its other values, in the space's order (a conditional knob with its condition
made true), then the combination of each knob's fastest value. A configuration's speed is
the geometric mean over batch sizes of its samples/s relative to the base's (batch sizes
where either does not fit do not count); one that runs out of memory where the base fits
is not eligible, nor is a compile mode whose compile seconds are not repaid within the
trial budget (compile_seconds >= budget x (1 - 1/speed): the time the faster steps save
in a trial that runs its whole budget). The fastest eligible configuration wins: each
maths-neutral knob of the space is narrowed to its value there. A batch size that does not
fit the winner is trained in micro-batches: `micro_batch_size` becomes the largest probed
batch size that fits and divides every one that does not (`auto` when none does).

Where probes run: as Ray tasks with the trial's resources (one per configuration, all its
batch sizes), so they land on the hardware trials use, also on a cluster whose driver has
no GPU. Each (configuration, batch size) is an MLflow child run with `autospeed.kind=probe`.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from autospeed.track import layout as t
from autospeed.show.live import probe_line
from autospeed.space import Param, SearchSpec

MATHS_NEUTRAL = ("compile", "channels_last", "cudnn_benchmark", "data_loader", "num_workers", "pin_memory",
                 "persistent_workers", "prefetch_factor", "optimizer_impl", "attention")
OK, OOM, FAILED = "ok", "oom", "failed"  # a probe's status (autospeed.status of its run)
_PROBE_VALIDATION_SAMPLES = 8  # evaluation runs after every probe step (to time each step): keep it tiny
_WARM: list[bool] = []  # non-empty once this worker process ran its untimed warm-up probe


@dataclass
class Probe:
    """One systems configuration at one batch size."""

    config: dict[str, Any]
    batch_size: int
    status: str  # ok, oom or failed
    samples_per_second: float | None = None  # steady state: over the last `steps` steps, train clock
    compile_seconds: float | None = None  # the first step's seconds with a compile mode, else 0
    peak_memory_mb: float | None = None
    error: str | None = None


@dataclass
class Decision:
    """What the probe fixed, and the narrowed space the trials search."""

    fixed: dict[str, Any]  # maths-neutral knob -> value (its only choice in the narrowed space)
    micro_batch_size: int | str | None  # for batch sizes that do not fit; None: every batch size fits
    spec: SearchSpec
    probes: list[Probe] = field(default_factory=list)

    def describe(self) -> str:
        knobs = ", ".join(f"{k}={v}" for k, v in self.fixed.items()) or "nothing to fix"
        micro = f"; micro_batch_size {self.micro_batch_size} for the batch sizes that do not fit" \
            if self.micro_batch_size is not None else ""
        return f"probe fixed: {knobs}{micro}"


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
    the combination of winners, which `run_probes` adds once the singles are measured)."""
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


# ---------------------------------------------------------------- one configuration (runs in a Ray task)
def probe_config(spec_json: str, config: dict[str, Any], threads: int) -> list[dict[str, Any]]:
    """Probe one systems configuration at every batch size of the space; one dict per batch size."""
    from autospeed.train.trainer import train

    spec = SearchSpec.model_validate_json(spec_json)
    workload = _probe_workload(spec)
    if not _WARM:  # a fresh worker's one-time costs (first allocations, thread pools) are no configuration's
        _WARM.append(True)
        eager = {**config, "compile": "none"} if "compile" in config else config  # no compile paid twice
        try:
            warm = _probe_recipe(spec, eager, batch_sizes(spec)[0], workload)
        except ValueError:  # the batch size does not fit the data: its probe below records why
            warm = None
        if warm is not None:
            train(warm, workload, num_threads=threads)
    out = []
    for b in batch_sizes(spec):
        probe = Probe(config, b, FAILED)
        try:
            recipe = _probe_recipe(spec, config, b, workload)
        except ValueError as e:
            probe.error = str(e).splitlines()[0]
            out.append(asdict(probe))
            continue
        events = []
        result = train(recipe, workload, on_eval=events.append, num_threads=threads)
        _measure(probe, result, events, spec.probe.warmup_steps, spec.probe.steps)
        out.append(asdict(probe))
    return out


def _probe_workload(spec: SearchSpec):
    """The search's workload with a tiny validation set: the probe evaluates after every step only to read
    the train clock there (evaluation is off the clock), never for the metric."""
    import dataclasses

    import torch

    from autospeed.workloads import load_workload_once

    w = load_workload_once(spec.workload, spec.workload_options)  # a worker probing again loads it once
    n = _PROBE_VALIDATION_SAMPLES
    if w.val_x is not None:
        return dataclasses.replace(w, val_x=w.val_x[:n], val_y=w.val_y[:n])
    if not isinstance(w.val_dataset, torch.utils.data.IterableDataset):
        return dataclasses.replace(w, val_dataset=torch.utils.data.Subset(w.val_dataset, range(n)))
    return w


def _probe_recipe(spec: SearchSpec, config: dict[str, Any], batch_size: int, workload):
    """The search's recipe with this configuration and batch size, run for warmup + steps optimizer steps
    with an evaluation after each (to read the clock) and a target it cannot meet (only steps end it)."""
    from autospeed.train.data import dataset_length
    from autospeed.recipe import Target

    n = dataset_length(workload.train_dataset, "train_dataset") if workload.uses_datasets else len(workload.train_x)
    steps_per_epoch = n // batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"batch_size {batch_size} exceeds the {n} training samples")
    total = spec.probe.warmup_steps + spec.probe.steps
    base = spec.recipe_for({**config, "batch_size": batch_size})
    target = base.resolved_target
    never = Target(metric=target.metric, mode=target.mode, value=1e300 if target.mode == "max" else -1e300)
    return base.model_copy(update={
        "accumulation_steps": 1, "micro_batch_size": None, "target": never, "target_accuracy": None,
        "epochs": total / steps_per_epoch, "eval_every_epochs": 1 / steps_per_epoch})


def _measure(probe: Probe, result, events: list, warmup_steps: int, steps: int) -> None:
    if result.status.value == OOM:
        probe.status, probe.error = OOM, result.error
        return
    by_step = {e.step: e for e in events}
    end = by_step.get(warmup_steps + steps)
    start = by_step.get(warmup_steps)
    if result.error is not None or end is None or (warmup_steps and start is None):
        probe.error = result.error or "did not run its probe steps within the trial budget"
        return
    seconds = end.train_seconds - (start.train_seconds if start else 0.0)
    samples = end.samples - (start.samples if start else 0)
    probe.status = OK
    probe.samples_per_second = samples / seconds if seconds > 0 else None
    probe.compile_seconds = result.compile_seconds
    probe.peak_memory_mb = result.peak_memory_mb


# ---------------------------------------------------------------- deciding
def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def speeds(probes: list[Probe]) -> dict[str, dict[int, Probe]]:
    """config key -> batch size -> probe."""
    out: dict[str, dict[int, Probe]] = {}
    for p in probes:
        out.setdefault(_key(p.config), {})[p.batch_size] = p
    return out


def relative_speed(mine: dict[int, Probe], base: dict[int, Probe]) -> float | None:
    """Geometric mean of samples/s relative to the base over batch sizes where both fit; None when this
    configuration is not eligible (it fails, or runs out of memory where the base fits)."""
    ratios = []
    for b, ref in base.items():
        p = mine.get(b)
        if ref.status != OK or not ref.samples_per_second:
            continue
        if p is None or p.status != OK or not p.samples_per_second:
            return None
        ratios.append(p.samples_per_second / ref.samples_per_second)
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None


def repaid(config: dict[str, Any], probes: dict[int, Probe], speed: float, budget_seconds: float) -> bool:
    """A compile mode pays for itself when its compile seconds are below what its faster steps save in a
    trial that runs its whole budget: budget x (1 - 1/speed). Eager configurations always qualify."""
    if config.get("compile", "none") == "none":
        return True
    compile_seconds = [p.compile_seconds for p in probes.values() if p.status == OK and p.compile_seconds is not None]
    if not compile_seconds:
        return False
    return sum(compile_seconds) / len(compile_seconds) < budget_seconds * (1.0 - 1.0 / speed)


def fastest(configs: list[dict[str, Any]], probes: list[Probe], budget_seconds: float) -> dict[str, Any]:
    """The fastest eligible configuration (the base when none beats it)."""
    by_config = speeds(probes)
    base = by_config[_key(configs[0])]
    best, best_speed = configs[0], 1.0
    for c in configs[1:]:
        mine = by_config.get(_key(c))
        speed = relative_speed(mine, base) if mine else None
        if speed is not None and speed > best_speed and repaid(c, mine, speed, budget_seconds):
            best, best_speed = c, speed
    return best


def combination(spec: SearchSpec, configs: list[dict[str, Any]], probes: list[Probe],
                budget_seconds: float) -> dict[str, Any]:
    """The base with each knob at its fastest one-at-a-time value."""
    base = configs[0]
    combined = dict(base)
    for knob in systems_knobs(spec):
        moved = [c for c in configs[1:] if c.get(knob) != base.get(knob)]
        winner = fastest([base, *moved], probes, budget_seconds)
        for k in (knob, *(spec.space[knob].when or {})):
            if k in winner:
                combined[k] = winner[k]
    return _active(spec, combined)


def micro_batch_for(probes: dict[int, Probe]) -> int | str | None:
    """The micro-batch for batch sizes that do not fit: the largest that fits and divides all of them."""
    fit = sorted(b for b, p in probes.items() if p.status == OK)
    too_big = [b for b, p in probes.items() if p.status == OOM]
    if not too_big:
        return None
    dividing = [m for m in fit if all(b % m == 0 for b in too_big)]
    return dividing[-1] if dividing else "auto"


def narrowed(spec: SearchSpec, winner: dict[str, Any], micro_batch_size: int | str | None) -> SearchSpec:
    """The space with each maths-neutral knob at its winning value (a knob whose condition the winner does
    not meet dropped) and, where some batch size does not fit, micro_batch_size at the probe's."""
    space: dict[str, Param] = {}
    for k, p in spec.space.items():
        if k not in MATHS_NEUTRAL:
            space[k] = p
        elif k in winner:
            space[k] = p.model_copy(update={"choice": [winner[k]], "uniform": None, "loguniform": None,
                                            "int_": None})
    user_set = "micro_batch_size" in spec.space or "micro_batch_size" in spec.fixed
    if micro_batch_size is not None and not user_set:
        space["micro_batch_size"] = Param(choice=[micro_batch_size])
    return spec.model_copy(update={"space": space})


# ---------------------------------------------------------------- the stage (driver side)
def run_probes(spec: SearchSpec, client, parent_id: str, search_id: str, resources: dict[str, float],
               threads: int, console=sys.stdout) -> Decision:
    """Probe, log each probe as an MLflow child run, print a line per configuration, decide."""
    import ray

    started = time.perf_counter()
    remote = ray.remote(num_cpus=resources["cpu"], num_gpus=resources["gpu"], max_retries=0)(probe_config)
    spec_json = spec.model_dump_json()
    budget = spec.budget.max_train_seconds
    configs = configurations(spec, spec.probe.max_configs)
    sizes = batch_sizes(spec)
    print(f"probe: {len(configs)}+ systems configurations x batch sizes {sizes}, "
          f"{spec.probe.warmup_steps} warm-up + {spec.probe.steps} timed steps each", file=console, flush=True)
    probes: list[Probe] = []
    experiment = client.get_run(parent_id).info.experiment_id

    def measure(config: dict[str, Any], index: int) -> None:
        found = [Probe(**p) for p in ray.get(remote.remote(spec_json, config, threads))]
        probes.extend(found)
        for p in found:
            _log(client, experiment, parent_id, search_id, index, p)
        print(probe_line(index, config, [asdict(p) for p in found]), file=console, flush=True)

    for i, config in enumerate(configs):
        measure(config, i)
    if len(configs) > 1:
        combined = combination(spec, configs, probes, budget)
        if combined not in configs and len(configs) < spec.probe.max_configs:
            configs.append(combined)
            measure(combined, len(configs) - 1)
    winner = fastest(configs, probes, budget)
    micro = micro_batch_for(speeds(probes)[_key(winner)])
    decision = Decision(fixed=winner, micro_batch_size=micro, spec=narrowed(spec, winner, micro), probes=probes)
    client.set_tag(parent_id, t.TAG_PROBE_FIXED, json.dumps({**winner, "micro_batch_size": micro}, sort_keys=True))
    t.log_batch(client, parent_id, t.metrics({t.M_PROBE_SECONDS: time.perf_counter() - started}))
    print(decision.describe(), file=console, flush=True)
    return decision


def _log(client, experiment: str, parent_id: str, search_id: str, index: int, p: Probe) -> None:
    """One probe as a child run: the systems knobs and batch size as params; the measurements as metrics."""
    from mlflow.entities import RunStatus

    with t.interrupts_held():
        tags = {t.TAG_PARENT: parent_id, t.TAG_SEARCH_ID: search_id, t.TAG_KIND: t.KIND_PROBE,
                t.TAG_STATUS: p.status, t.TAG_PROBE_CONFIG: str(index)}
        if p.error:
            tags[t.TAG_ERROR] = p.error[:500]
        run = client.create_run(experiment, run_name=f"probe-{index:02d}-b{p.batch_size}", tags=tags)
        values = {t.M_SAMPLES_PER_SECOND: p.samples_per_second, t.M_COMPILE_SECONDS: p.compile_seconds,
                  t.M_PEAK_MEMORY_MB: p.peak_memory_mb, t.M_OOM: float(p.status == OOM)}
        t.log_batch(client, run.info.run_id, t.metrics(values),
                    params=t.recipe_params({**p.config, "batch_size": p.batch_size}))
        client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.FINISHED))
