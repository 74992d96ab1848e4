"""A user's own training script: autospeed's recipe for it against the script as written (a), and what the knob
context costs per step against the same loop written plainly (b).

    python experiments/own_script.py                                  # both parts: search, export, measure
                                                                      # (~15-25 min on 2 quiet CPU cores)
    python experiments/own_script.py --best best.yaml                 # (a) with an exported recipe given
    python experiments/own_script.py --part overhead                  # (b) only
    python experiments/own_script.py --part speedup -- --samples 2000 # the scripts' own arguments after --

(a) speedup. `python examples/own_script/train_plain.py ARGS` (the script as its author wrote it, its own
defaults) against `autospeed train --script examples/own_script/train.py --config BEST.yaml --no-track --json
-- ARGS` (the same script made searchable with autospeed.init, run with the search's exported recipe), each in
a fresh process, interleaved (plain, autospeed, plain, ...), --repeats a side. BEST.yaml is --best; without it
this script first runs `autospeed search --script examples/own_script/train.py --space
examples/own_script/space.yaml -- ARGS` and `autospeed export` (CPU lock shared: the search's recipe is measured
here, not its wall time). The exported recipe trains unchanged but for its seed, a fresh one per repeat
(--seed-base; --keep-seed: the exported seed), as experiments/speedup.py does: the search picked the recipe on
its own seeds. The plain script seeds itself (torch.manual_seed(0)); nothing here changes it.

The measure, the same for both sides and timed the same way from outside: wall seconds from the start of the
process (the parent's clock just before it starts the command) to the moment the parent reads the line
`epoch N: val_accuracy A, T s` whose A first meets the target (both scripts print it right after the evaluation,
before they stop), reading the child's stdout line by line, unbuffered (PYTHONUNBUFFERED=1, which autospeed also
sets for the script it runs). For the autospeed side this counts the `autospeed train` command's own start-up
and its start of the script; the run's result also gives `wall_to_target_seconds`, which counts from the start
of the script's process (autospeed/train/result.py: the context's origin), shown beside it. The target is the
plain script's `--target` (0.9 unless ARGS give another); the recipe's target must be the same. The ratio of
the medians (a run that missed counts as infinitely slow) comes with outcome.speedup_interval's 90% interval.

(b) overhead. In one process, interleaved (which loop goes first alternates), the example's model
(cifar_like.ResNet, width 8), batch 64, SGD with Nesterov momentum, weight decay and cosine LR as in
train_plain.py, label smoothing 0.1, fp32, DataLoader with num_workers 0 over data already in memory: --steps
optimizer steps written plainly (`for x, y in loader: loss; zero_grad; backward; step; sched.step`) against
the same through autospeed.script.context.Context (ctx.dataloader, prepare_model, optimizer, scheduler, steps,
backward, step). Same seed, same batches, same schedule: the parameters after the last step are compared, to
show the loops did the same work. The clock covers exactly --steps steps after --warmup-steps (the data
fetch of those steps included; no evaluation, no start-up). Goal: the context at most 2% slower per step.

Timing holds the CPU lock (/tmp/cpu.lock) exclusively. Writes --out whole (provenance header first) and, for
(a), a copy of the measured recipe beside it (<out stem>_best.yaml).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, ROOT, cpu_lock, provenance, results_header, shown, write_results  # noqa: E402

EXAMPLE = ROOT / "examples" / "own_script"
PLAIN = EXAMPLE / "train_plain.py"
SCRIPT = EXAMPLE / "train.py"
SPACE = EXAMPLE / "space.yaml"
PLAIN_DEFAULT_TARGET = 0.9  # train_plain.py's --target default
EVAL_LINE = re.compile(r"^epoch (\d+): val_accuracy ([0-9.]+), ([0-9.]+) s$")  # what both scripts print
GOAL_OVERHEAD = 1.02  # the context's seconds per step / the plain loop's, at most
KNOBS = ("batch_size", "lr", "schedule", "num_workers", "optimizer_impl", "epochs", "max_train_seconds", "seed")


# ---------------------------------------------------------------- (a) speedup
def script_target(script_args: list[str]) -> float:
    """The target the plain script stops at: its --target in ARGS, else its default."""
    for i, arg in enumerate(script_args):
        if arg == "--target" and i + 1 < len(script_args):
            return float(script_args[i + 1])
        if arg.startswith("--target="):
            return float(arg.split("=", 1)[1])
    return PLAIN_DEFAULT_TARGET


def search_and_export(space: Path, work: Path, script_args: list[str], trials: int | None) -> Path:
    """`autospeed search --script train.py --space SPACE -- ARGS` in a fresh process, then `autospeed export`:
    the exported recipe's path. Stores under `work`; the CPU lock shared (the recipe is measured, not the search)."""
    name = f"own-script-{time.strftime('%Y%m%d-%H%M%S')}"
    uri = f"sqlite:///{work / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "autospeed", "search", "--script", str(SCRIPT), "--space", str(space),
           "--tracking-uri", uri, "--storage-path", str(work), "--name", name]
    cmd += ["--trials", str(trials)] if trials else []
    cmd += ["--", *script_args] if script_args else []
    print(f"searching: {' '.join(cmd)}", flush=True)
    with cpu_lock(exclusive=False):
        start = time.perf_counter()
        code = subprocess.run(cmd, cwd=ROOT).returncode
        print(f"search took {time.perf_counter() - start:.0f} s", flush=True)
    if code:
        raise SystemExit(f"own_script: `autospeed search --script {shown(SCRIPT)}` exited {code} (its error is above)")
    best = work / f"{name}_best.yaml"
    export = subprocess.run([sys.executable, "-m", "autospeed", "export", "--name", name, "--tracking-uri", uri,
                             "--out", str(best)], capture_output=True, text=True, cwd=ROOT)
    if export.returncode:
        raise SystemExit(f"own_script: `autospeed export --name {name}` failed: {export.stderr.strip()[-2000:]}")
    return best


def baseline_recipe(space: Path, work: Path, script_args: list[str], target: float) -> Path:
    """--no-search: the space file's baseline recipe (the script's own knobs) as the recipe measured; a smoke run
    of the measurement, not autospeed's recipe."""
    from autospeed.space import load_spec, with_script

    spec = with_script(load_spec(space), str(SCRIPT), script_args)
    data = yaml.safe_load(spec.recipe_for({}, baseline=True).to_yaml())
    data["target_accuracy"] = target
    path = work / "baseline_recipe.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def timed_process(cmd: list[str], target: float, stderr_path: Path) -> dict:
    """Run `cmd` from the repository root, reading its stdout line by line: the parent's seconds from just before
    the start to the first evaluation line that meets `target` (None: none did) and to the process's exit, the
    evaluations seen (epoch, accuracy, the script's own printed seconds, the parent's seconds) and every other
    stdout line (autospeed's JSON result)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(stderr_path, "w") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err)
        evals, other, to_target, printed = [], [], None, None
        for raw in iter(proc.stdout.readline, b""):
            seen = time.perf_counter() - start
            line = raw.decode(errors="replace").rstrip("\n")
            m = EVAL_LINE.match(line)
            if m is None:
                other.append(line)
                continue
            accuracy = float(m.group(2))
            evals.append((int(m.group(1)), accuracy, float(m.group(3)), seen))
            if to_target is None and accuracy >= target:
                to_target, printed = seen, float(m.group(3))
        code = proc.wait()
        exit_seconds = time.perf_counter() - start
    return {"to_target_seconds": to_target, "printed_seconds": printed, "exit_seconds": exit_seconds,
            "returncode": code, "evals": evals, "other": other, "stderr": str(stderr_path)}


def autospeed_result(run: dict) -> dict | None:
    """The JSON result `autospeed train --json` printed after the script's own lines, or None."""
    lines = run["other"]
    first = next((i for i, line in enumerate(lines) if line.startswith("{")), None)
    if first is None:
        return None
    try:
        return json.loads("\n".join(lines[first:]))
    except json.JSONDecodeError:
        return None


def tail(path: str) -> str:
    return "\n".join(Path(path).read_text(errors="replace").splitlines()[-30:])


def measure_speedup(best_path: Path, script_args: list[str], target: float, seeds: list[int], work: Path,
                    warm_up: bool) -> dict[str, list[dict]]:
    """Both commands, interleaved (plain, autospeed, plain, ...), one per seed of the recipe, exclusive CPU lock."""
    best_yaml = yaml.safe_load(best_path.read_text())
    runs: dict[str, list[dict]] = {"plain": [], "autospeed": []}
    plain_cmd = [sys.executable, str(PLAIN.relative_to(ROOT)), *script_args]
    with cpu_lock(exclusive=True):
        if warm_up:  # the files both commands import, read once off the clock (page cache), for both alike
            subprocess.run([sys.executable, "-c", "import torch, autospeed.cli, autospeed.train.trainer, "
                            "autospeed.script.context"], cwd=ROOT, check=True)
        for r, seed in enumerate(seeds):
            config = work / f"recipe-seed{seed}.yaml"
            config.write_text(yaml.safe_dump({**best_yaml, "seed": seed}, sort_keys=False))
            auto_cmd = [sys.executable, "-m", "autospeed", "train", "--script", str(SCRIPT.relative_to(ROOT)),
                        "--config", str(config), "--no-track", "--json", *(["--", *script_args] if script_args else [])]
            for label, cmd in (("plain", plain_cmd), ("autospeed", auto_cmd)):
                run = timed_process(cmd, target, work / f"{label}-{r}.stderr")
                if label == "plain" and run["returncode"]:
                    raise SystemExit(f"own_script: `{' '.join(cmd)}` exited {run['returncode']}:\n"
                                     f"{tail(run['stderr'])}")
                if label == "autospeed":
                    run["result"] = autospeed_result(run)
                    if run["result"] is None:
                        raise SystemExit(f"own_script: `{' '.join(cmd)}` exited {run['returncode']} without a "
                                         f"result:\n{tail(run['stderr'])}")
                runs[label].append(run)
                got = f"{run['to_target_seconds']:.2f} s" if run["to_target_seconds"] is not None else "missed"
                extra = ""
                if label == "autospeed":
                    res = run["result"]
                    inner = res.get("wall_to_target_seconds")
                    extra = (f", status {res['status']}, result's wall_to_target "
                             + (f"{inner:.2f} s" if inner is not None else "-"))
                print(f"repeat {r + 1}/{len(seeds)} {label}: to target {got} (exit {run['exit_seconds']:.2f} s, "
                      f"{len(run['evals'])} evaluations{extra})", flush=True)
    return runs


def cell(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def speedup_lines(args, script_args: list[str], target: float, best_path: Path, source: str, seeds: list[int],
                  runs: dict[str, list[dict]]) -> list[str]:
    from autospeed.outcome import interval_note, median_tta, speedup_interval

    best_yaml = yaml.safe_load(best_path.read_text())
    wall = {k: [r["to_target_seconds"] for r in v] for k, v in runs.items()}
    printed = {k: [r["printed_seconds"] for r in v] for k, v in runs.items()}
    exits = {k: [r["exit_seconds"] for r in v] for k, v in runs.items()}
    inner = [r["result"].get("wall_to_target_seconds") for r in runs["autospeed"]]
    statuses = [r["result"]["status"] for r in runs["autospeed"]]
    reached = {k: sum(x is not None for x in v) for k, v in wall.items()}
    n = len(seeds)

    def every(values):
        return ", ".join("missed" if x is None else f"{x:.2f}" for x in values)

    lines = [
        "## (a) Time to target: the script as written against autospeed's recipe for it", "",
        f"Plain: `python {shown(PLAIN)}{' ' + ' '.join(script_args) if script_args else ''}` (the script as written, "
        f"{'its own defaults but for these arguments' if script_args else 'its own defaults'}). "
        f"Autospeed: `python -m autospeed train --script {shown(SCRIPT)} --config RECIPE --no-track --json"
        f"{' -- ' + ' '.join(script_args) if script_args else ''}` with {source} `{shown(best_path)}` (copied beside "
        f"this file as `{Path(args.out).stem}_best.yaml`), "
        + (f"its own seed {seeds[0]}." if args.keep_seed else
           f"seeds {seeds[0]}..{seeds[-1]}, one per repeat (the recipe's own seed: {best_yaml.get('seed')})."),
        f"{n} runs a side, interleaved (plain, autospeed, plain, ...), each a fresh process, exclusive CPU lock. "
        f"Target: val_accuracy >= {target:g}.",
        "Wall to target = seconds from the process's start (the parent's clock, just before it starts the command) "
        "to the parent's reading of the first `epoch N: val_accuracy A, T s` line with A at the target; the same "
        "measure, taken the same way, on both sides. A run that missed counts as infinitely slow in a median.", "",
        "| side | reached | median wall to target s | min | max | median printed T s (the script's own clock) "
        "| median wall to exit s | every run (wall to target s, in order) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for label in ("plain", "autospeed"):
        got = [x for x in wall[label] if x is not None]
        lines.append(f"| {label} | {reached[label]}/{n} | {cell(median_tta(wall[label]))} | "
                     f"{cell(min(got) if got else None)} | {cell(max(got) if got else None)} | "
                     f"{cell(median_tta(printed[label]))} | {cell(statistics.median(exits[label]))} | "
                     f"{every(wall[label])} |")
    mp, ma = median_tta(wall["plain"]), median_tta(wall["autospeed"])
    low, high = speedup_interval(wall["plain"], wall["autospeed"])
    if mp is not None and ma is not None:
        note = interval_note(wall["plain"], wall["autospeed"])
        ratio = (f"**{mp / ma:.2f}x** ({mp:.2f} s -> {ma:.2f} s; "
                 + (note if note else f"Mann-Whitney 90% interval {cell(low)}-"
                    + ("unbounded" if high is not None and math.isinf(high) else cell(high)) + "x") + ")")
    elif ma is not None:
        ratio = "**undefined: the plain script's median run missed the target** (autospeed's median reached it)"
    else:
        ratio = "**undefined: autospeed's median run missed the target**"
    lines += ["", f"Speed-up, plain / autospeed, ratio of the median walls to target: {ratio}.", "",
              f"autospeed's own figure, the result's `wall_to_target_seconds` (from the start of the script's "
              f"process, so without the `autospeed train` command's start-up and its start of the script): median "
              f"{cell(median_tta(inner))} s; every run: {every(inner)}. Statuses: {', '.join(statuses)}."]
    both = [(o, i) for o, i in zip(wall["autospeed"], inner) if o is not None and i is not None]
    if both:
        lines.append(f"The command's share (measured from outside minus the result's figure): median "
                     f"{statistics.median(o - i for o, i in both):.2f} s.")
    line_vs_status = [(r["to_target_seconds"] is not None, s == "reached") for r, s in zip(runs["autospeed"], statuses)]
    if any(a != b for a, b in line_vs_status):
        lines.append("Note: in some runs the printed line and the result's status disagree on reaching the target.")
    measured = best_yaml.get("measured") or {}
    if measured.get("speedup_vs_baseline") is not None:
        ci = (f" (90% interval {cell(measured.get('speedup_ci_low'))}-{cell(measured.get('speedup_ci_high'))})"
              if measured.get("speedup_ci_low") is not None else "")
        wall_claim = (f", wall to target {measured['wall_speedup_vs_baseline']:.2f}x"
                      if measured.get("wall_speedup_vs_baseline") else "")
        lines += ["", f"The search's claim (the recipe's `measured`, against the space file's baseline, the script's "
                      f"own knobs, run through autospeed; train clock): {measured['speedup_vs_baseline']:.2f}x{ci}"
                      f"{wall_claim}."]
    lines += ["", f"Recipe measured: `{json.dumps({k: best_yaml.get(k) for k in KNOBS})}`; the plain script: "
                  f"batch 64, lr 0.05, cosine over its epochs, 2 loader workers, default optimizer, 6 epochs, seed 0 "
                  f"(unless ARGS say otherwise)."]
    warnings = sorted({line for r in runs["autospeed"] for line in Path(r["stderr"]).read_text(errors="replace")
                       .splitlines() if line.startswith("warning:")})
    if warnings:
        lines += ["", "`autospeed train` warned: " + "; ".join(warnings)]
    return lines


def part_speedup(args, script_args: list[str]) -> tuple[list[str], Path]:
    from autospeed.recipe import load_recipe
    from autospeed.space import load_spec

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    target = script_target(script_args)
    if args.best:
        best_path, source = Path(args.best), "the exported recipe"
    elif args.no_search:
        best_path, source = baseline_recipe(Path(args.space), work, script_args, target), \
            "(--no-search, a smoke run) the space file's baseline recipe, not a search's,"
    else:
        space_target = load_spec(args.space).resolved_target
        if space_target.metric != "val_accuracy" or space_target.value != target:
            raise SystemExit(f"own_script: {args.space} searches for {space_target.describe()}, the plain script "
                             f"stops at val_accuracy >= {target:g}: they must be the same")
        best_path, source = search_and_export(Path(args.space), work, script_args, args.trials), "the exported recipe"
    recipe = load_recipe(best_path)  # validates it
    got = recipe.resolved_target
    if recipe.workload != "script" or got.metric != "val_accuracy" or got.value != target:
        raise SystemExit(f"own_script: {best_path} is workload {recipe.workload!r} with target {got.describe()}; "
                         f"the plain script stops at val_accuracy >= {target:g}: they must be the same")
    seeds = [recipe.seed] * args.repeats if args.keep_seed else [args.seed_base + r for r in range(args.repeats)]
    if not args.keep_seed and recipe.seed in seeds:
        raise SystemExit(f"own_script: --seed-base: seed {recipe.seed} is the recipe's own; pick another base")
    runs = measure_speedup(best_path, script_args, target, seeds, work, not args.no_warm_up)
    return speedup_lines(args, script_args, target, best_path, source, seeds, runs), best_path


# ---------------------------------------------------------------- (b) overhead
def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _params(model):
    import torch

    return torch.cat([p.detach().flatten().cpu() for p in model.parameters()])


class _StepClock:
    """Counts optimizer steps: the clock starts after o.warmup_steps and stops after o.steps more (synced)."""

    def __init__(self, o, device):
        self.o, self.device, self.done, self.t0, self.seconds = o, device, 0, 0.0, 0.0

    def stepped(self) -> bool:
        """One more step; True once the timed steps are done (then `seconds` holds their time)."""
        self.done += 1
        if self.done in (self.o.warmup_steps, self.o.warmup_steps + self.o.steps):
            _sync(self.device)
            now = time.perf_counter()
            if self.done == self.o.warmup_steps:
                self.t0 = now
            else:
                self.seconds = now - self.t0
                return True
        return False


def plain_steps(train_ds, o) -> tuple[float, object]:
    """The loop as train_plain.py writes it (without its EMA and evaluation): seconds for o.steps steps after
    o.warmup_steps, and the parameters at the end."""
    import torch
    from cifar_like import ResNet
    from torch import nn
    from torch.utils.data import DataLoader

    device = torch.device(o.device)
    torch.manual_seed(o.seed)
    loader = DataLoader(train_ds, batch_size=o.batch_size, shuffle=True, drop_last=True, num_workers=0,
                        generator=torch.Generator().manual_seed(o.seed))
    model = ResNet(o.width).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=o.epochs * len(loader))
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    clock = _StepClock(o, device)
    for _ in range(o.epochs):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = criterion(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if clock.stepped():
                return clock.seconds, _params(model)
    raise RuntimeError("plain loop: ran out of epochs before its steps")


def context_steps(train_ds, o) -> tuple[float, object]:
    """The same through the knob context, as train.py calls it: seconds for o.steps steps after o.warmup_steps,
    and the parameters at the end."""
    import torch
    from cifar_like import ResNet
    from torch import nn

    from autospeed.recipe import Recipe
    from autospeed.script.context import Context

    ctx = Context(Recipe(workload="script", batch_size=o.batch_size, lr=o.lr, momentum=0.9, weight_decay=5e-4,
                         schedule="cosine", epochs=o.epochs, num_workers=0, precision="fp32", compile="none",
                         device=o.device, seed=o.seed, target_accuracy=0.9, max_train_seconds=1e9))
    device = ctx.device
    loader = ctx.dataloader(train_ds)
    model = ResNet(o.width)
    net = ctx.prepare_model(model)
    opt = ctx.optimizer(torch.optim.SGD, model.parameters(), lr=ctx.lr(), momentum=0.9, nesterov=True,
                        weight_decay=5e-4)
    sched = ctx.scheduler(opt)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    clock = _StepClock(o, device)
    for x, y in ctx.steps(loader):
        loss = criterion(net(x), y)
        ctx.backward(loss)
        if ctx.step(opt, sched):
            if clock.stepped():
                return clock.seconds, _params(model)
    raise RuntimeError("context loop: ctx.steps ended before its steps")


def part_overhead(args) -> tuple[list[str], float]:
    import torch

    sys.path.insert(0, str(EXAMPLE))
    from cifar_like import make_datasets

    if args.threads:
        torch.set_num_threads(args.threads)
    train_ds, _ = make_datasets(args.samples, 10)  # in memory, off the clock
    per_epoch = args.samples // args.batch_size
    o = argparse.Namespace(device=args.device, seed=0, batch_size=args.batch_size, width=args.width, lr=0.05,
                           steps=args.steps, warmup_steps=args.warmup_steps,
                           epochs=math.ceil((args.warmup_steps + args.steps + 1) / per_epoch))
    loops = {"plain": plain_steps, "context": context_steps}
    seconds: dict[str, list[float]] = {k: [] for k in loops}
    params = {}
    with cpu_lock(exclusive=True):
        for fn in loops.values():  # warm-up: allocator, thread pool, first-call paths
            fn(train_ds, o)
        for r in range(args.overhead_repeats):
            order = list(loops) if r % 2 == 0 else list(reversed(loops))
            for name in order:
                s, p = loops[name](train_ds, o)
                seconds[name].append(s / args.steps)
                params[name] = p
            print(f"repeat {r + 1}/{args.overhead_repeats}: plain {seconds['plain'][-1] * 1e3:.2f} ms/step, "
                  f"context {seconds['context'][-1] * 1e3:.2f} ms/step", flush=True)
    med = {k: statistics.median(v) for k, v in seconds.items()}
    ratio = med["context"] / med["plain"]
    paired = statistics.median(c / p for c, p in zip(seconds["context"], seconds["plain"]))
    diff = (params["context"] - params["plain"]).abs().max().item()
    ms = lambda v: f"{statistics.median(v) * 1e3:.2f} ({min(v) * 1e3:.2f}-{max(v) * 1e3:.2f})"  # noqa: E731
    return [
        "## (b) Per-step cost of the knob context against the plain loop", "",
        f"cifar_like.ResNet(width={args.width}), {args.samples} samples in memory, batch {args.batch_size}, SGD "
        f"(Nesterov, momentum 0.9, weight decay 5e-4, lr 0.05, cosine over {o.epochs} epochs), label smoothing 0.1, "
        f"fp32, DataLoader num_workers 0, {args.device}, {torch.get_num_threads()} torch threads. Each run: "
        f"{args.warmup_steps} warm-up steps off the clock, then {args.steps} timed steps (data fetch, forward, "
        f"backward, optimizer and scheduler steps; no evaluation, no start-up). {args.overhead_repeats} runs of each "
        f"in one process after one untimed warm-up run of each, interleaved, the first loop alternating; same seed "
        f"and batches.", "",
        "| loop | median ms/step (min-max) |", "| --- | ---: |",
        f"| plain (`for x, y in loader`: loss, zero_grad, backward, step, sched.step) | {ms(seconds['plain'])} |",
        f"| context (`ctx.steps`, `ctx.backward`, `ctx.step(opt, sched)`) | {ms(seconds['context'])} |", "",
        f"Context / plain, ratio of the medians: **{ratio:.3f}x** (median of the per-repeat ratios {paired:.3f}x); "
        f"goal <= {GOAL_OVERHEAD:g}x: **{'met' if ratio <= GOAL_OVERHEAD else 'NOT met'}**.", "",
        ("The parameters after the last step are identical in both loops: they did the same work, step for step."
         if diff == 0 else f"The parameters after the last step differ by up to {diff:.3g} (max abs): "
                           f"{'rounding only' if diff < 1e-4 else 'the loops did not do the same work'}."),
        "At this machine's step-to-step spread (min-max above) a 2% difference is below what (b) can resolve; "
        "(c) measures the context's fixed cost per step directly.",
    ], med["plain"]


def _tiny_steps(use_context: bool, steps: int) -> float:
    """Seconds per step of a loop whose maths costs almost nothing (nn.Linear(16, 4), batch 32, SGD, cosine),
    plain or through the context: what remains of the difference is the context's own bookkeeping per step."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from autospeed.recipe import Recipe
    from autospeed.script.context import Context

    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(32 * steps, 16, generator=g), torch.randint(0, 4, (32 * steps,), generator=g))
    torch.manual_seed(0)
    model = nn.Linear(16, 4)
    if use_context:
        ctx = Context(Recipe(workload="script", batch_size=32, epochs=1, schedule="cosine", device="cpu",
                             target_accuracy=0.9, max_train_seconds=1e9))
        net = ctx.prepare_model(model)
        loader = ctx.dataloader(ds)
        opt = ctx.optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
        sched = ctx.scheduler(opt)
        t0 = time.perf_counter()
        for x, y in ctx.steps(loader):
            ctx.backward(nn.functional.cross_entropy(net(x), y))
            ctx.step(opt, sched)
        return (time.perf_counter() - t0) / steps
    loader = DataLoader(ds, batch_size=32, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=len(loader))
    t0 = time.perf_counter()
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return (time.perf_counter() - t0) / steps


def part_bookkeeping(args, example_step_seconds: float | None) -> list[str]:
    """(c) The context's fixed cost per step, on a step whose maths costs almost nothing, in microseconds, and
    as a share of the example's plain step ((b)'s median)."""
    import torch

    seconds: dict[str, list[float]] = {"plain": [], "context": []}
    steps = max(50, args.steps * 2)
    with cpu_lock(exclusive=True):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        _tiny_steps(False, steps), _tiny_steps(True, steps)  # warm-up
        for r in range(args.overhead_repeats):
            for name in (("plain", "context") if r % 2 == 0 else ("context", "plain")):
                seconds[name].append(_tiny_steps(name == "context", steps))
        torch.set_num_threads(threads)
    med = {k: statistics.median(v) * 1e6 for k, v in seconds.items()}
    extra = med["context"] - med["plain"]
    share = (f"; against (b)'s plain step of {example_step_seconds * 1e3:.2f} ms that is "
             f"**{extra / (example_step_seconds * 1e6) * 100:.2f}%**" if example_step_seconds else "")
    return [
        "## (c) The context's own bookkeeping per step", "",
        f"The same two loops around a step whose maths costs almost nothing (nn.Linear(16, 4), batch 32, SGD, "
        f"cosine, 1 torch thread), {steps} steps a run, {args.overhead_repeats} runs each, interleaved: the "
        f"difference is what the context itself adds to every step (its iterator, the forward wrapper, the "
        f"scaler and accumulation bookkeeping).", "",
        "| loop | median us/step |", "| --- | ---: |",
        f"| plain | {med['plain']:.1f} |", f"| context | {med['context']:.1f} |", "",
        f"The context adds **{extra:.1f} us per step**{share}.",
    ]


# ---------------------------------------------------------------- main
def main() -> None:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    own, script_args = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="%(prog)s [options] [-- ARGS for both scripts]")
    p.add_argument("--part", choices=("speedup", "overhead", "all"), default="all")
    p.add_argument("--best", help="(a) the exported recipe to measure; default: search and export it first")
    p.add_argument("--no-search", action="store_true",
                   help="(a) without --best: measure the space file's baseline recipe instead (a smoke run)")
    p.add_argument("--space", default=str(SPACE), help="(a) the search-space file searched without --best")
    p.add_argument("--trials", type=int, help="(a) search trials (default: the space file's budget.trials)")
    p.add_argument("--repeats", type=int, default=7, help="(a) timed runs a side, interleaved")
    p.add_argument("--seed-base", type=int, default=500, help="(a) autospeed's repeat r trains with seed-base + r")
    p.add_argument("--keep-seed", action="store_true", help="(a) every autospeed run with the recipe's own seed")
    p.add_argument("--no-warm-up", action="store_true", help="(a) skip the untimed import that warms the page cache")
    p.add_argument("--work", default="/tmp/autospeed-own-script", help="(a) the search's store and the runs' files")
    p.add_argument("--steps", type=int, default=200, help="(b) timed optimizer steps per run")
    p.add_argument("--warmup-steps", type=int, default=10, help="(b) steps before the clock starts, each run")
    p.add_argument("--overhead-repeats", type=int, default=9, help="(b) runs of each loop, interleaved")
    p.add_argument("--samples", type=int, default=5000, help="(b) training samples in memory")
    p.add_argument("--width", type=int, default=8, help="(b) ResNet width")
    p.add_argument("--batch-size", type=int, default=64, help="(b) batch size")
    p.add_argument("--device", default="cpu", help="(b) cpu or cuda")
    p.add_argument("--threads", type=int, help="(b) torch threads (default: torch's)")
    p.add_argument("--out", default=str(RESULTS / "own_script.md"),
                   help="results file; (a) copies the measured recipe beside it as <stem>_best.yaml")
    args = p.parse_args(own)
    if args.repeats < 1 or args.overhead_repeats < 1 or args.steps < 1 or args.warmup_steps < 1:
        p.error("--repeats, --overhead-repeats, --steps and --warmup-steps must be >= 1")
    if args.samples // args.batch_size < 1:
        p.error("--samples must hold at least one batch")

    print(provenance(end=False), flush=True)
    lines: list[str] = []
    best_path = None
    if args.part in ("speedup", "all"):
        speedup, best_path = part_speedup(args, script_args)
        lines += speedup
    if args.part in ("overhead", "all"):
        overhead, plain_step_seconds = part_overhead(args)
        lines += ([""] if lines else []) + overhead + [""] + part_bookkeeping(args, plain_step_seconds)

    out = Path(args.out)
    if best_path is not None:
        copy = out.with_name(f"{out.stem}_best.yaml")
        out.parent.mkdir(parents=True, exist_ok=True)
        if best_path.resolve() != copy.resolve():
            shutil.copyfile(best_path, copy)
    text = results_header("A user's own training script: autospeed's recipe and the context's overhead") \
        + "\n".join(lines) + "\n"
    write_results(out, text)
    print()
    print(text)


if __name__ == "__main__":
    main()
