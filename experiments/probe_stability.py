"""Does the probe pick the same systems configuration every time? Its stage, run N times on one machine.

The probe stage (autospeed/search/probe.py) times each systems configuration under every maths
combination the space can train with, in interleaved rounds, and lets a value other than the default
win only when it is faster by more than the base's own spread across the rounds. This runs that
stage `--runs` times on one space (default search_spaces/fast.yaml), each run in a fresh Python
process, and writes each run's timings, margin and pick, and whether the picks agree.

Run:
    python experiments/probe_stability.py          # fast.yaml, 3 runs -> experiments/results/probe_stability.md
    python experiments/probe_stability.py --space search_spaces/lm.yaml --runs 3 --out /tmp/probe_lm.md
    python experiments/probe_stability.py --set probe.rounds=5 --set probe.steps=40 --out /tmp/probe.md

What a run is: `python experiments/probe_stability.py --one SPACE` runs `probe_stage` with
`probe_config` called in that process, the function a search runs in its Ray task per (configuration,
round), with the torch threads a CPU trial gets (all cores; --threads). Ray and MLflow are left out:
their start-up and logging are outside every probe timing, and a fresh process pays the same one-time
costs as a fresh Ray worker (its first probe is the untimed warm-up). The exclusive CPU lock
(/tmp/cpu.lock) is held for all runs, so nothing else that respects it loads the cores meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import RESULTS, cpu_lock, results_header, shown, write_results, write_space_variant  # noqa: E402


def one_run(space: str, threads: int | None, out: str) -> None:
    """The probe stage of `space`, in this process; its decision and every probe as JSON in `out`."""
    from dataclasses import asdict

    from autospeed.search.probe import Probe, probe_config, probe_stage, wants_probe
    from autospeed.space import load_spec

    spec = load_spec(space)
    if not wants_probe(spec):
        raise SystemExit(f"{space}: the probe has nothing to decide (probe.enabled is false, or the space has no "
                         f"maths-neutral knob and no batch_size); set probe.enabled: true or add a systems knob")
    gpus = spec.resources.gpus_per_trial
    threads = threads or spec.resources.cpus_per_trial or (4 if gpus else os.cpu_count() or 1)
    spec_json = spec.model_dump_json()
    started = time.perf_counter()
    decision = probe_stage(spec, lambda config, r: [Probe(**p) for p in probe_config(spec_json, config, threads, r)])
    v = decision.verdict
    Path(out).write_text(json.dumps({
        "stage_seconds": time.perf_counter() - started, "threads": threads, "fixed": decision.fixed,
        "default": decision.default, "micro_batch_size": decision.micro_batch_size, "margin": decision.margin(),
        "challenger": decision.challenger, "speed": v.speed if v else None,
        "noise": v.noise if v and v.noise != float("inf") else None, "configs": decision.configs,
        "probes": [asdict(p) for p in decision.probes]}))


def knobs(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items()) or "(no systems knob)"


def report(space: str, overrides: list[str], variant: str, runs: list[dict]) -> str:
    """The results file: one row per run, whether the picks agree, each configuration's speed per run, and
    every (configuration, maths, batch size)'s samples/s per round. `variant`: the space file the runs read
    (`space` with `overrides`)."""
    from autospeed.search.probe import Probe, maths_label, timings, verdict
    from autospeed.space import load_spec

    spec = load_spec(variant)
    picks = [knobs(r["fixed"]) for r in runs]
    agree = len(set(picks)) == 1
    p = spec.probe
    lines = [f"Space: {shown(space)}{' with ' + ' '.join(overrides) if overrides else ''}; probe: "
             f"{p.warmup_steps} warm-up + {p.steps} timed steps per probe, {p.rounds} interleaved rounds, "
             f"{len(runs[0]['configs'])} configurations; {len(runs)} runs, each a fresh process, "
             f"{runs[0]['threads']} torch threads.",
             "",
             f"**The {len(runs)} picks {'agree' if agree else 'DISAGREE'}: "
             f"{picks[0] if agree else ' / '.join(picks)}.**",
             "",
             "| run | probe stage s | pick | margin |", "|---|---|---|---|"]
    lines += [f"| {i} | {r['stage_seconds']:.1f} | {knobs(r['fixed'])} | {r['margin']} |"
              for i, r in enumerate(runs, 1)]
    lines += ["", "Probe stage s: the stage's wall seconds in its process (workload loading and the untimed warm-up "
              "probe included). Margin: the speed of the fastest configuration other than the default, relative to "
              "the default (geometric mean over maths, batch sizes and rounds), against the noise it must beat "
              "(per maths and batch size, the default's fastest timing / its slowest - 1; the median of those).", "",
              "## Each configuration's speed relative to the default (noise), per run", "",
              "| configuration | " + " | ".join(f"run {i}" for i in range(1, len(runs) + 1)) + " |",
              "|---|" + "---|" * len(runs)]
    probes = [[Probe(**q) for q in r["probes"]] for r in runs]
    by_run = [timings(ps) for ps in probes]
    base_key = json.dumps(runs[0]["configs"][0], sort_keys=True)
    for config in runs[0]["configs"]:
        key, cells = json.dumps(config, sort_keys=True), []
        for by in by_run:
            v = verdict(by[key], by[base_key]) if key in by and base_key in by else None
            cells.append("default" if key == base_key else "not eligible" if v is None else
                         f"{v.speed:.3f}x ({v.noise:.1%})")
        lines.append(f"| {knobs(config)} | " + " | ".join(cells) + " |")
    lines += ["", "## Samples/s of each probe, per run (its rounds in order)", "",
              "| configuration | maths | batch | " + " | ".join(f"run {i}" for i in range(1, len(runs) + 1)) + " |",
              "|---|---|---|" + "---|" * len(runs)]
    first = {}
    for q in probes[0]:
        first.setdefault((json.dumps(q.config, sort_keys=True), json.dumps(q.maths, sort_keys=True), q.batch_size), q)
    for (key, maths_key, batch), q in first.items():
        cells = []
        for by in by_run:
            per = by.get(key, {}).get((maths_key, batch), {})
            cells.append(" / ".join(f"{per[r].samples_per_second:,.0f}" if per[r].samples_per_second else per[r].status
                                    for r in sorted(per)) or "-")
        lines.append(f"| {knobs(q.config)} | {maths_label(q.maths) or '-'} | {batch} | " + " | ".join(cells) + " |")
    return results_header("Probe stability: the probe's pick in repeated runs on one machine") + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", default="search_spaces/fast.yaml", help="the search space whose probe runs")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a dotted override of the space (YAML value), e.g. probe.rounds=5; repeatable")
    parser.add_argument("--runs", type=int, default=3, help="probe stages, each in a fresh process")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: a trial's: all cores)")
    parser.add_argument("--work", default=None, help="folder for the space variant and each run's JSON")
    parser.add_argument("--out", default=f"{RESULTS}/probe_stability.md")
    parser.add_argument("--one", metavar="JSON", help=argparse.SUPPRESS)  # internal: one run, its result here
    args = parser.parse_args(argv)
    if args.one:
        one_run(args.space, args.threads, args.one)
        return
    if args.runs < 1:
        raise SystemExit(f"--runs must be at least 1, got {args.runs}")
    work = Path(args.work or tempfile.mkdtemp(prefix="probe-stability-"))
    space = str(write_space_variant(args.space, args.set, "probe_stability", work)) if args.set else args.space
    runs = []
    with cpu_lock(exclusive=True):
        for i in range(1, args.runs + 1):
            out = work / f"run{i}.json"
            cmd = [sys.executable, os.path.abspath(__file__), "--space", space, "--one", str(out)]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            print(f"run {i}/{args.runs}: {' '.join(cmd[1:])}", flush=True)
            if subprocess.run(cmd).returncode:
                raise SystemExit(f"run {i}: the probe stage failed (its error is above)")
            runs.append(json.loads(out.read_text()))
    text = report(args.space, args.set, space, runs)
    write_results(args.out, text)
    print(f"\n{text}\nwrote {args.out}")


if __name__ == "__main__":
    main()
