"""The probe stage (docs/design.md "Probe stage"): time the systems knobs before the trials, then fix them.

Knobs that do not change the maths (MATHS_NEUTRAL) change TTA only through speed, so a few
timed steps decide them instead of whole trials. Each systems configuration is trained for
`warmup_steps + steps` optimizer steps under each maths combination the trials can train with
(every value of the space's STEP_COST_MATHS: optimizer x precision, the maths knobs that change a
step's cost; every other maths knob of the space at the baseline's value where the space offers
it, else its first) at every batch size of the space (micro-batch = batch, no accumulation), and
measured: steady-state samples/s over the last `steps` (train clock), compile seconds (the first
step's, with a compile mode), peak memory, out-of-memory. Evaluation runs after every step on a
tiny validation set, only to read the clock there; each worker first runs one untimed probe per
maths combination, so the first configuration does not pay the start-up.

Timing rounds: every configuration is timed `rounds` times, interleaved (base, A, B, then A, B,
base, ...: the order rotates each round), so drift of the machine hits all alike (a lone
configuration, with only batch sizes to try, has nothing to compare: one round). A
configuration's speed is the geometric mean, over maths combinations, batch sizes and rounds, of
its samples/s relative to the base's in the same round (one number per configuration, not one
per maths combination: the trials fix one systems configuration for every maths they sample).
The noise is the base's own spread across those rounds: per maths combination and batch size,
its fastest timing / its slowest - 1, the median of those (what a configuration identical to the
base shows, in one timing and from round to round; a spread of the rounds' geometric means alone
let a base that was slow in most of its timings lose to an equal configuration). A value other
than the default wins only when it is faster by more than that noise (speed - 1 > noise); the
decision line and the parent run state the margin either way. Why one noise for the whole space
rather than a decision per maths combination: the trials cannot change the systems knobs with
their maths, and one geometric mean over all combinations is steadier than any one of them.

Which configurations (at most `max_configs`): the base configuration (the baseline's value of
each knob where the space offers it, else the space's first), then one knob at a time moved
to each of its other values, in the space's order (a conditional knob with its condition
made true), then the combination of each knob's winning value (timed in `rounds` more rounds
against the base). Cost: configurations x maths combinations x batch sizes x rounds probes.
One that runs out of memory or fails where the base fits is not eligible (batch sizes where the
base does not fit do not count), nor is a compile mode whose compile seconds are not repaid
within the production budget (compile_seconds >= budget x (1 - 1/speed): the time the faster steps
save in a run of the whole budget; the budget is confirm.max_train_seconds, a long job's
production length, where the search sets it, else the trial budget, which the exported recipe
keeps). The fastest eligible configuration faster than the noise wins: each maths-neutral knob
of the space is narrowed to its value there. A batch size that does not fit the winner is
trained in micro-batches: `micro_batch_size` becomes the largest probed batch size that fits
and divides every one that does not (`auto` when none does).

Maths-neutrality (`probe.neutrality.enabled`, search/neutrality.py): after the first timing round, each
configuration's change from the base is trained for a few hundred steps under the baseline's maths, same seed and
data order, and its loss trace compared with the band between the baseline's two seeds. A change outside the
band is not eligible (it changes the maths: it is not fixed as if it were free), and its knobs stay searched by
the trials; the combination is made of neutral values only (each checked alone). The fixed configuration's TTA is
then predicted as the default's over its speed-up, the timing noise as the interval (a prediction, said so).
Off, the knobs are assumed neutral, as before.

What to probe and how to decide are search/probe_decide.py's (pure functions over Probe records);
this module runs the stage. A user's script is probed and checked through its own loop, a run of the script per
probe and per trace (search/probe_script.py); the decision is the same. Where probes run: `run_probes` runs
`probe_stage` with one Ray task per (configuration, round) with the trial's resources, so they land on the
hardware trials use, also on a cluster whose driver has no GPU; `probe_stage` takes any `measure(config, round)`
(experiments/probe_stability.py calls `probe_config` in-process, without Ray). Each (configuration,
maths combination, batch size) is an MLflow child run with `autospeed.kind=probe` (its samples/s the
median over the rounds); the parent records the fix, the margin behind it (tag
`autospeed.probe_margin`; metrics `probe_speedup`, `probe_noise`) and the stage's seconds.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from autospeed.script.options import is_script
from autospeed.search.neutrality import Neutrality, never_target
from autospeed.search.neutrality import check as check_neutrality
from autospeed.search.probe_decide import (  # noqa: F401
    FAILED,
    MATHS_NEUTRAL,
    OK,
    OOM,
    STEP_COST_MATHS,
    Cells,
    Decision,
    Probe,
    Verdict,
    _active,
    _key,
    base_noise,
    batch_sizes,
    by_batch,
    combination,
    configurations,
    fastest,
    maths_combinations,
    maths_label,
    micro_batch_for,
    narrowed,
    noise_text,
    repaid,
    summary,
    systems_knobs,
    timings,
    verdict,
    wants_probe,
)
from autospeed.search.session import SearchSession
from autospeed.show.live import probe_line
from autospeed.space import SearchSpec
from autospeed.track import names, writers
from autospeed.track.store import interrupts_held

_PROBE_VALIDATION_SAMPLES = 8  # evaluation runs after every probe step (to time each step): keep it tiny
_WARM: list[bool] = []  # non-empty once this worker process ran its untimed warm-up probe


# ---------------------------------------------------------------- one configuration, one round (a Ray task)
def probe_config(spec_json: str, config: dict[str, Any], threads: int, round_: int = 0) -> list[dict[str, Any]]:
    """Probe one systems configuration under every maths combination at every batch size of the space, in
    timing round `round_`; one dict (a Probe) per maths combination and batch size. A compile mode's first
    round (0, or `rounds` for the combination's rounds of its own) compiles from an empty inductor cache, so
    its compile seconds are a new machine's (probe_decide.cold_compile_seconds), whatever earlier searches left
    in this machine's."""
    spec = SearchSpec.model_validate_json(spec_json)
    if config.get("compile", "none") != "none" and round_ % spec.probe.rounds == 0:
        with cold_inductor_cache():
            return _probe_config(spec, config, threads, round_)
    return _probe_config(spec, config, threads, round_)


@contextlib.contextmanager
def cold_inductor_cache():
    """In this (Ray worker) process: torch.compile caches in a new empty folder (Triton's inside it), removed
    after, the environment restored; inductor's in-memory caches cleared on the way in and out."""
    from torch._inductor.utils import clear_caches

    folder = tempfile.mkdtemp(prefix="autospeed-probe-inductor-")
    saved = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    os.environ["TORCHINDUCTOR_CACHE_DIR"], os.environ["TRITON_CACHE_DIR"] = folder, os.path.join(folder, "triton")
    clear_caches()
    try:
        yield folder
    finally:
        clear_caches()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(folder, ignore_errors=True)


def _probe_config(spec: SearchSpec, config: dict[str, Any], threads: int, round_: int) -> list[dict[str, Any]]:
    if is_script(spec.workload):  # the script's own loop, a fresh process per probe (search/probe_script.py)
        from autospeed.search.probe_script import script_probe

        run = script_probe(spec, config, threads)
    else:
        run = _trainer_probe(spec, config, threads)
    out = []
    for maths, b in itertools.product(maths_combinations(spec), batch_sizes(spec)):
        probe = Probe(config, b, FAILED, maths=maths, round=round_)
        try:
            result, events = run(maths, b)
        except ValueError as e:
            probe.error = str(e).splitlines()[0]
            out.append(asdict(probe))
            continue
        probe.applied = {k: result.applied[k] for k in (*config, *STEP_COST_MATHS) if k in result.applied}
        _measure(probe, result, events, spec.probe.warmup_steps, spec.probe.steps)
        out.append(asdict(probe))
    return out


def _trainer_probe(spec: SearchSpec, config: dict[str, Any], threads: int):
    """run(maths, batch_size) -> (the trainer's result, its evaluations): one probe of `config` in this process,
    after the worker's untimed warm-up."""
    from autospeed.train.trainer import train

    workload = _probe_workload(spec)
    if not _WARM:  # a fresh worker's one-time costs (first allocations, thread pools, each optimizer's and
        _WARM.append(True)  # precision's first use) are no configuration's: one untimed probe per maths
        eager = {**config, "compile": "none"} if "compile" in config else config  # no compile paid twice
        for maths in maths_combinations(spec):
            try:
                warm = _probe_recipe(spec, eager, maths, batch_sizes(spec)[0], workload)
            except ValueError:  # the batch size does not fit the data: its probe records why
                break
            train(warm, workload, num_threads=threads)

    def run(maths: dict[str, Any], batch_size: int):
        events: list = []
        recipe = _probe_recipe(spec, config, maths, batch_size, workload)
        return train(recipe, workload, on_eval=events.append, num_threads=threads), events

    return run


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


def neutrality_config(spec_json: str, base: dict[str, Any], changes: list[dict[str, Any]],
                      threads: int | None) -> list[dict[str, Any]]:
    """The maths-neutrality check (search/neutrality.py) of each change to the base configuration, under the
    baseline's maths and batch size: one dict (a Neutrality) per change."""
    from autospeed.recipe import Recipe
    from autospeed.train.data import dataset_length

    spec = SearchSpec.model_validate_json(spec_json)
    baseline = spec.recipe_for({}, baseline=True)
    baseline = Recipe.model_validate({**baseline.model_dump(), **base})
    if is_script(spec.workload):  # traced through the script's own loop (search/probe_script.py)
        from autospeed.search.probe_script import script_neutrality

        return [asdict(x) for x in script_neutrality(spec, baseline, changes, threads)]
    workload = _probe_workload(spec)
    n = dataset_length(workload.train_dataset, "train_dataset") if workload.uses_datasets else len(workload.train_x)
    s = spec.probe.neutrality
    found = check_neutrality(baseline, changes, workload, steps=s.steps, window_steps=s.window_steps,
                             band_fraction=s.band_fraction, train_samples=n, threads=threads)
    return [asdict(x) for x in found]


def _probe_recipe(spec: SearchSpec, config: dict[str, Any], maths: dict[str, Any], batch_size: int, workload):
    """The search's recipe with this configuration, maths and batch size, run for warmup + steps optimizer
    steps with an evaluation after each (to read the clock) and a target it cannot meet (only steps end it)."""
    from autospeed.train.data import dataset_length

    n = dataset_length(workload.train_dataset, "train_dataset") if workload.uses_datasets else len(workload.train_x)
    steps_per_epoch = n // batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"batch_size {batch_size} exceeds the {n} training samples")
    total = spec.probe.warmup_steps + spec.probe.steps
    base = spec.recipe_for({**_active(spec, {**maths, **config}), "batch_size": batch_size})
    return base.model_copy(update={
        "accumulation_steps": 1, "micro_batch_size": None, **never_target(base),
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


# ---------------------------------------------------------------- the stage
def probe_stage(spec: SearchSpec, measure: Callable[[dict[str, Any], int], list[Probe]],
                console=sys.stdout, neutral: Callable[[dict[str, Any], list[dict[str, Any]]], list[Neutrality]]
                | None = None) -> Decision:
    """Time every configuration in interleaved rounds with `measure(config, round)` (its probes under every
    maths combination and batch size), print a line per configuration and maths, decide. With
    `probe.neutrality.enabled`, first check each configuration's change from the base with `neutral(base, changes)`
    (default: in this process): one that is not maths-neutral is not eligible, and its knobs are left to the
    trials. No tracking."""
    configs = configurations(spec, spec.probe.max_configs)
    # one configuration (batch sizes only: what fits) has nothing to compare: one round
    # a compile pays for itself within what the exported recipe trains: a long job's production budget
    budget = spec.confirm.max_train_seconds or spec.budget.max_train_seconds
    rounds = spec.probe.rounds if len(configs) > 1 else 1
    combos = maths_combinations(spec)
    labels = [maths_label(m) for m in combos if maths_label(m)]
    maths = f" x {len(combos)} maths ({', '.join(labels)})" if labels else ""
    times = f"{rounds} interleaved rounds" if rounds > 1 else "1 round"
    print(f"probe: {len(configs)}+ systems configurations{maths} x batch sizes {batch_sizes(spec)} x {times}, "
          f"{spec.probe.warmup_steps} warm-up + {spec.probe.steps} timed steps each", file=console, flush=True)
    probes: list[Probe] = []

    def timed(group: list[dict[str, Any]], first_round: int) -> None:
        for r in range(first_round, first_round + rounds):
            started = time.perf_counter()
            shift = r % len(group)  # the order rotates: no configuration always runs first
            for config in group[shift:] + group[:shift]:
                probes.extend(measure(config, r))
            print(f"  probe round {r + 1}: {len(group)} configurations in {time.perf_counter() - started:.1f} s"
                  if len(group) > 1 else f"  probe round {r + 1}: {time.perf_counter() - started:.1f} s",
                  file=console, flush=True)

    timed(configs, 0)
    checks = _check_neutrality(spec, configs, neutral, console)
    maths_knobs = sorted({k for c in checks if not c.neutral for k in c.change})
    eligible = [c for c in configs if not any(k in maths_knobs and c.get(k) != configs[0].get(k) for k in c)]
    if len(configs) > 1:
        combined = combination(spec, eligible, probes, budget)
        if combined not in configs and len(configs) < spec.probe.max_configs:
            configs.append(combined)
            eligible.append(combined)  # made of neutral values only
            timed([configs[0], combined], rounds)  # against the base again, in rounds of its own
    by_config = timings(probes)
    base = by_config[_key(configs[0])]
    for i, config in enumerate(configs):
        cells = by_config[_key(config)]
        per_maths: dict[str, list[Probe]] = {}
        for p in summary(cells):
            per_maths.setdefault(maths_label(p.maths), []).append(p)
        for label, found in per_maths.items():
            print(probe_line(i, config, [asdict(p) for p in found], maths=label), file=console, flush=True)
        v = verdict(cells, base) if i else None
        if i:
            said = f"{v.speed:.2f}x the default (noise {noise_text(v.noise)})" if v else \
                "not eligible: it fails or runs out of memory where the default fits"
            if config not in eligible:
                said += "; not eligible: it changes the maths (neutrality check)"
            print(f"  probe {i}: {said}", file=console, flush=True)
    winner, challenger, v = fastest(eligible, probes, budget)
    micro = micro_batch_for(by_batch(by_config[_key(winner)]))
    decision = Decision(winner, micro, narrowed(spec, winner, micro, maths_knobs), probes, configs[0], challenger, v,
                        configs, checks, maths_knobs)
    print(decision.describe(), file=console, flush=True)
    return decision


def _check_neutrality(spec: SearchSpec, configs: list[dict[str, Any]], neutral, console) -> list[Neutrality]:
    """Each configuration's change from the base, checked for maths-neutrality (search/neutrality.py) when the
    space asks for it; a line each."""
    if not spec.probe.neutrality.enabled or len(configs) < 2:
        return []
    base = configs[0]
    changes = [{k: v for k, v in c.items() if base.get(k) != v} for c in configs[1:]]
    s = spec.probe.neutrality
    print(f"probe: maths-neutrality check of {len(changes)} knob changes: the baseline's loss over {s.steps} "
          f"steps, same seed and data order, against two seeds' band", file=console, flush=True)
    if neutral is None:
        found = [Neutrality(**d) for d in neutrality_config(spec.model_dump_json(), base, changes, None)]
    else:
        found = neutral(base, changes)
    for check in found:
        print(check.line(), file=console, flush=True)
    return found


def run_probes(spec: SearchSpec, session: SearchSession, resources: dict[str, float], threads: int) -> Decision:
    """The probe stage of a search: each (configuration, round) a Ray task with the trial's resources; each
    probe an MLflow child run of the parent, which records the fix and the margin behind it."""
    import ray

    client, parent_id, search_id, console = session.client, session.parent_id, session.search_id, session.console

    started = time.perf_counter()
    remote = ray.remote(num_cpus=resources["cpu"], num_gpus=resources["gpu"], max_retries=0)(probe_config)
    spec_json = spec.model_dump_json()

    def measure(config: dict[str, Any], round_: int) -> list[Probe]:
        return [Probe(**p) for p in ray.get(remote.remote(spec_json, config, threads, round_))]

    checker = ray.remote(num_cpus=resources["cpu"], num_gpus=resources["gpu"], max_retries=0)(neutrality_config)

    def neutral(base: dict[str, Any], changes: list[dict[str, Any]]) -> list[Neutrality]:
        return [Neutrality(**d) for d in ray.get(checker.remote(spec_json, base, changes, threads))]

    decision = probe_stage(spec, measure, console, neutral)
    experiment = client.get_run(parent_id).info.experiment_id
    by_config = timings(decision.probes)
    for i, config in enumerate(decision.configs):
        for p in summary(by_config[_key(config)]):
            _log(client, experiment, parent_id, search_id, i, p)
    noise = decision.verdict.noise if decision.verdict and not math.isinf(decision.verdict.noise) else None
    with interrupts_held():
        client.set_tag(parent_id, names.TAG_PROBE_FIXED,
                       json.dumps({**decision.fixed, "micro_batch_size": decision.micro_batch_size}, sort_keys=True))
        client.set_tag(parent_id, names.TAG_PROBE_MARGIN, decision.margin())
        if decision.neutrality:
            client.set_tag(parent_id, names.TAG_PROBE_NEUTRALITY,
                           json.dumps(decision.neutrality_record(), sort_keys=True))
        writers.log_batch(client, parent_id, writers.metrics({names.M_PROBE_SECONDS: time.perf_counter() - started,
                                                            names.M_PROBE_SPEEDUP: decision.speedup,
                                                            names.M_PROBE_NOISE: noise}))
    return decision


def _log(client, experiment: str, parent_id: str, search_id: str, index: int, p: Probe) -> None:
    """One probe as a child run: the systems knobs, the varied maths and the batch size as params; the
    measurements (summary's: over every round) as metrics."""
    from mlflow.entities import RunStatus

    with interrupts_held():
        tags = {names.TAG_PARENT: parent_id, names.TAG_SEARCH_ID: search_id, names.TAG_KIND: names.KIND_PROBE,
                names.TAG_STATUS: p.status, names.TAG_PROBE_CONFIG: str(index)}
        if p.error:
            tags[names.TAG_ERROR] = p.error[:500]
        maths = {k: p.maths[k] for k in STEP_COST_MATHS if k in p.maths}
        suffix = "".join(f"-{v}" for v in maths.values())
        run = client.create_run(experiment, run_name=f"probe-{index:02d}-b{p.batch_size}{suffix}", tags=tags)
        values = {names.M_SAMPLES_PER_SECOND: p.samples_per_second, names.M_COMPILE_SECONDS: p.compile_seconds,
                  names.M_PEAK_MEMORY_MB: p.peak_memory_mb, names.M_OOM: float(p.status == OOM)}
        writers.log_batch(client, run.info.run_id, writers.metrics(values),
                    params=writers.recipe_params({**maths, **p.config, "batch_size": p.batch_size}))
        client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.FINISHED))
