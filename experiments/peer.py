"""What a user gets without autospeed: the usual HPO set-up against autospeed's search, judged by TTA.

    python experiments/peer.py                                   # fast.yaml
    python experiments/peer.py --space search_spaces/lm.yaml     # a min-mode target (val_loss)
    python experiments/peer.py --trials 4 --set confirm.repeats=1 --repeats 2   # a smoke run
    python experiments/peer.py --autospeed-recipe best.yaml      # autospeed's side: a recipe exported earlier

1. autospeed: `python -m autospeed search --space <file>` in a fresh process (trials, confirmation,
   best.yaml), then `autospeed export`. Compute: that command's wall seconds, process start to exit,
   and the train-clock seconds its trial (and probe, confirm) runs recorded in MLflow.
2. The peer, in this process: an Optuna study with TPESampler(seed=the file's sampler.seed,
   n_startup_trials=the file's) and MedianPruner() (Optuna's defaults), as many trials as the
   search (the file's budget.trials; autospeed spends its trial 0 on the baseline, the peer samples
   every one), over the file's space without its systems knobs (SYSTEMS_KNOBS: they change speed,
   not the maths; unsearched, they take the file's `fixed` values or the recipe defaults, as for a
   user who does not tune them). Each trial trains with autospeed's trainer for --epochs (default:
   the file's fixed.epochs) with the target out of reach, so only the epochs, the pruner or the
   --trial-seconds safety cap end it; every evaluation goes to trial.report(value of the file's target
   metric, step=evaluation number) and should_prune(). The objective is the metric's value at the end
   (the model a user keeps), maximised or minimised by the target's mode (val_accuracy up, val_loss
   down). Compute: the study's wall seconds (data preparation included, exclusive CPU lock) and the
   trials' summed train clock.
3. TTA of both chosen recipes as production runs, --repeats each, interleaved, the same seeds
   --seed-base.., each a fresh `autospeed train --json --no-track` process, exclusive CPU lock:
   autospeed's exported recipe unchanged but for the seed; the peer's best trial's recipe with the
   file's target and eval cadence, the schedule it was tuned with (--epochs) and a budget of
   --peer-seconds. Reports peer / autospeed median TTA with a bootstrap 90% interval over the seeds.
Writes --out whole, both recipes, as timed, inside it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    RESULTS,
    ROOT,
    add_timing_arguments,
    cpu_lock,
    describe_runs,
    provenance,
    recipes_as_timed,
    results_header,
    search_and_export,
    search_compute,
    shown,
    time_interleaved,
    write_results,
    write_space_variant,
)

from autospeed.outcome import Status, median_tta, speedup_interval  # noqa: E402
from autospeed.recipe import Recipe  # noqa: E402
from autospeed.space import SearchSpec, load_spec  # noqa: E402

# docs/design.md "Probe stage": the knobs that change TTA only through speed, never the maths.
SYSTEMS_KNOBS = frozenset({"compile", "channels_last", "cudnn_benchmark", "data_loader", "num_workers",
                           "pin_memory", "prefetch_factor", "persistent_workers", "optimizer_impl", "attention",
                           "micro_batch_size"})
UNREACHABLE = 1e30  # a target value no metric meets: the peer's trials run their epochs out


def peer_recipe(spec: SearchSpec, params: dict, epochs: float, max_train_seconds: float, *,
                target_stop: bool) -> Recipe:
    """The recipe of the peer's `params`: the file's layers, `epochs` planned, `max_train_seconds` of budget;
    without `target_stop`, its target metric moved out of reach so that no evaluation ends the run."""
    fields = {**spec.base(), **spec.fixed, **params, "epochs": epochs, "max_train_seconds": max_train_seconds}
    if not target_stop:
        target = spec.resolved_target
        fields.pop("target_accuracy", None)
        fields["target"] = {**target.model_dump(), "value": UNREACHABLE if target.mode == "max" else -UNREACHABLE}
    return Recipe.model_validate(fields)


def run_peer(spec: SearchSpec, epochs: float, trial_seconds: float) -> dict:
    """The usual HPO study: TPE + MedianPruner on the target metric after `epochs`. Its best params, compute
    (wall seconds of data preparation and the study; summed train clock) and trial counts by state."""
    import optuna

    from autospeed.train.trainer import train
    from autospeed.workloads import load_workload

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    maths = spec.model_copy(update={"space": {k: p for k, p in spec.space.items() if k not in SYSTEMS_KNOBS}})
    threads = spec.resources.cpus_per_trial or (None if spec.resources.gpus_per_trial else os.cpu_count())
    target = spec.resolved_target
    train_seconds: list[float] = []

    def objective(trial: optuna.Trial) -> float:
        recipe = peer_recipe(spec, maths.suggest(trial), epochs, trial_seconds, target_stop=False)
        evaluations = 0

        def report(event) -> bool:
            nonlocal evaluations
            trial.report(event.value, evaluations)  # step = evaluation number: the same epoch in every trial
            evaluations += 1
            return trial.should_prune()

        result = train(recipe, workload, on_eval=report, num_threads=threads)
        train_seconds.append(result.train_seconds)
        last = result.history[-1]["value"] if result.history else math.nan
        pruned = result.status == Status.STOPPED_EARLY
        print(f"peer trial {trial.number}: {'pruned' if pruned else result.status}, {target.metric} {last:.4f} after "
              f"{result.epochs_done:.1f} epochs, {result.train_seconds:.1f} s train clock", flush=True)
        if pruned:
            raise optuna.TrialPruned()
        return math.nan if result.status.infeasible else last  # nan: Optuna records a failed trial

    with cpu_lock(exclusive=True):
        start = time.perf_counter()
        workload = load_workload(spec.workload, spec.workload_options)  # once per study, as a search does
        study = optuna.create_study(
            direction="maximize" if target.mode == "max" else "minimize",
            sampler=optuna.samplers.TPESampler(seed=spec.sampler.seed, n_startup_trials=spec.sampler.n_startup_trials),
            pruner=optuna.pruners.MedianPruner())
        study.optimize(objective, n_trials=spec.budget.trials)
        wall_seconds = time.perf_counter() - start
    states = Counter(t.state.name.lower() for t in study.trials)
    if not states.get("complete"):
        raise SystemExit(f"peer: no trial of the study completed ({dict(states)}); nothing to time")
    return {"params": study.best_trial.params, "value": study.best_value, "wall_seconds": wall_seconds,
            "train_seconds": sum(train_seconds), "states": states}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--space", default=str(ROOT / "search_spaces" / "fast.yaml"))
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an override merged into the space file for both sides, e.g. confirm.repeats=1 (repeat it)")
    p.add_argument("--trials", type=int, help="trials of each side (default: the file's budget.trials)")
    p.add_argument("--epochs", type=float, help="the peer's fixed epoch budget (default: the file's fixed.epochs)")
    p.add_argument("--trial-seconds", type=float, default=600.0,
                   help="a safety cap on each peer trial's train clock; the epochs are meant to end it")
    p.add_argument("--peer-seconds", type=float, default=60.0,
                   help="the peer recipe's train-clock budget as a production run (autospeed's keeps its own)")
    add_timing_arguments(p, baseline=False)
    p.add_argument("--autospeed-recipe", metavar="FILE",
                   help="autospeed's side: this recipe (exported earlier) instead of running its search now")
    p.add_argument("--work", default="/tmp/autospeed-peer")
    p.add_argument("--out", default=str(RESULTS / "peer.md"))
    args = p.parse_args()
    if args.repeats < 1 or (args.trials is not None and args.trials < 1):
        p.error("--repeats and --trials must be >= 1")

    work = Path(args.work)
    out = Path(args.out)
    overrides = args.set + ([f"budget.trials={args.trials}"] if args.trials else [])
    space = write_space_variant(args.space, overrides, "peer-autospeed", work / "spaces")
    spec = load_spec(space)
    epochs = args.epochs or spec.recipe_for({}).epochs  # the file's fixed.epochs, else the recipe default
    seeds = [args.seed_base + r for r in range(args.repeats)]
    print(provenance(end=False), flush=True)

    if args.autospeed_recipe:
        searched, compute, best_path = None, {}, Path(args.autospeed_recipe)
        print(f"\n== autospeed: no search, its recipe is {best_path}", flush=True)
    else:
        print(f"\n== autospeed: search {space}", flush=True)
        searched = search_and_export(space, work, spec.name, exclusive=True)
        if searched.best_path is None:
            raise SystemExit(f"peer: autospeed's search exported no recipe: {searched.export_error}")
        compute = search_compute(searched.tracking_uri, spec.name)
        best_path = searched.best_path
    print(f"\n== the peer: TPE + MedianPruner, {spec.budget.trials} trials of {epochs:g} epochs", flush=True)
    peer = run_peer(spec, epochs, args.trial_seconds)

    best_yaml = yaml.safe_load(best_path.read_text())
    peer_yaml = yaml.safe_load(peer_recipe(spec, peer["params"], epochs, args.peer_seconds, target_stop=True).to_yaml())
    if best_yaml.get("seed") in seeds or peer_yaml["seed"] in seeds:
        p.error(f"--seed-base: seeds {seeds} include a search's own seed; pick another base")
    recipes = {"peer": peer_yaml, "autospeed": best_yaml}
    runs = time_interleaved(recipes, seeds, work / "timed")

    ttas = {k: [r["tta_seconds"] for r in v] for k, v in runs.items()}
    mp, ma = median_tta(ttas["peer"]), median_tta(ttas["autospeed"])
    low, high = speedup_interval(ttas["peer"], ttas["autospeed"])
    bound = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    if mp is not None and ma is not None:
        ratio = f"{mp / ma:.2f}x (90% interval {bound(low)} to {bound(high)})"
    elif ma is not None:  # the peer's median run missed: it needed more than its whole budget
        ratio = f"> {args.peer_seconds / ma:.2f}x (the peer recipe's median run missed the target in " \
                f"{args.peer_seconds:g} s)"
    else:
        ratio = "undefined: autospeed's recipe's median run missed the target"
    target = spec.resolved_target
    trials = compute.get("trial", {})
    other = {k: v for k, v in compute.items() if k != "trial"}
    knobs = ("batch_size", "accumulation_steps", "optimizer", "lr", "schedule", "warmup_fraction", "precision",
             "compile", "max_train_seconds", "epochs", "eval_every_epochs")
    lines = [
        f"Space: `{shown(args.space)}`" + (f" with `{' '.join(overrides)}`" if overrides else "") +
        f" ({spec.workload}, target {target.describe()}), {spec.budget.trials} trials per side.", "",
        (f"- autospeed: `autospeed search` (TPE + ASHA on the train clock, trial 0 the baseline, confirmation "
         f"{spec.confirm.repeats} repeats of the top {spec.confirm.top_k}), then its exported recipe." if searched
         else f"- autospeed: **no search ran** (--autospeed-recipe): its recipe is `{shown(best_path)}`."),
        f"- peer: Optuna TPESampler(seed={spec.sampler.seed}, n_startup_trials={spec.sampler.n_startup_trials}) + "
        f"MedianPruner() {'maximising' if target.mode == 'max' else 'minimising'} {target.metric} after "
        f"{epochs:g} epochs (reported at every evaluation, every {spec.recipe_for({}).eval_every_epochs:g} epoch), "
        f"over the space's maths knobs ({', '.join(k for k in spec.space if k not in SYSTEMS_KNOBS)}); its chosen "
        f"recipe trains to the target with its {epochs:g}-epoch schedule and a {args.peer_seconds:g} s budget.", "",
        "Compute each side spent (exclusive CPU lock): autospeed's is the whole `python -m autospeed search` "
        "command, process start to exit; the peer's is its study, data preparation included, in this process.", "",
        "| side | compute, wall s | train clock of its trials, s | trials | other runs (train clock s) |",
        "| --- | ---: | ---: | --- | --- |",
        (f"| autospeed | {searched.wall_seconds:.1f} | {trials.get('train_seconds', 0.0):.1f} | "
         f"{trials.get('runs', 0)} | " + (", ".join(f"{k} {v['runs']} ({v['train_seconds']:.1f})"
                                                  for k, v in other.items()) or "-") + " |" if searched
         else "| autospeed | not run (--autospeed-recipe) | - | - | - |"),
        f"| peer | {peer['wall_seconds']:.1f} | {peer['train_seconds']:.1f} | {sum(peer['states'].values())} ("
        + ", ".join(f"{n} {s}" for s, n in peer["states"].items()) + ") | - |", "",
        f"Production runs: {args.repeats} per recipe, interleaved (peer, autospeed, ...), seeds "
        f"{seeds[0]}..{seeds[-1]} for both; each a fresh `python -m autospeed train --config X --json --no-track` "
        "process, exclusive CPU lock. TTA = train-clock seconds to the first evaluation that meets the target; "
        "a run that missed it counts as infinitely slow in a median.", "",
        "| recipe | median TTA s | min | max | every run (TTA s, in order) |", "| --- | ---: | ---: | ---: | --- |"]
    for label, rs in runs.items():
        med, lo, hi, every = describe_runs(rs)
        lines.append(f"| {label} | {med} | {lo} | {hi} | {every} |")
    lines += ["", f"**Peer TTA / autospeed TTA (ratio of medians, bootstrap over seeds): {ratio}.**", "",
              f"The peer's best trial: {target.metric} {peer['value']:.4f} after {epochs:g} epochs.", ""]
    lines += [f"- {label}: `{json.dumps({k: r.get(k) for k in knobs})}`" for label, r in recipes.items()]
    lines += ["", *recipes_as_timed(recipes)]
    warnings = sorted({w for rs in runs.values() for r in rs for w in r["warnings"]})
    if warnings:
        lines += ["", "`autospeed train` warned: " + "; ".join(warnings)]

    device = runs["autospeed"][0].get("environment", {}).get("device", "cpu")
    text = results_header(f"autospeed against the usual HPO set-up, by TTA ({spec.workload}, {device})", device) \
        + "\n".join(lines) + "\n"
    write_results(out, text)
    print(text)


if __name__ == "__main__":
    main()
