"""Orchestration overhead of a search: what Ray, Optuna and MLflow cost per trial.

    python experiments/search_overhead.py                  # smoke, fast and long
    python experiments/search_overhead.py --spaces smoke   # one of them
    python experiments/search_overhead.py --out experiments/results/search_overhead.md
    python experiments/search_overhead.py --spaces smoke --no-search      # a smoke run of the table, no Ray

overhead per trial = (search wall seconds - sum of the trials' wall seconds) / trials,
where a trial's wall seconds is the trainer's `wall_seconds` (building the model,
training, evaluating). The search's wall seconds run from `run_search` being
called to it returning: Ray's start, the dataset preparation, scheduling,
Optuna's sampling and MLflow logging are all overhead. Also reported: the same
without Ray's one-off start (first trial start to last trial end).
Goal (issue 3): <= 1 s per trial on 2 cores and <= 10% of wall time when trials
last >= 10 s. Confirmation runs are turned off in every space: they are not part
of this measurement. Searches run one at a time under the exclusive CPU lock.
--no-search runs no search: each space's baseline trains once in this process (no Ray, Optuna or
MLflow), and its row is the trainer call around its own `wall_seconds`: a smoke run of the table.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, cpu_lock, emit_table, provenance  # noqa: E402

from autospeed.search import run_search  # noqa: E402
from autospeed.space import spec_from_dict  # noqa: E402

GOAL_PER_TRIAL_S = 1.0
GOAL_FRACTION = 0.10  # of wall time, for trials of at least LONG_TRIAL_S
LONG_TRIAL_S = 10.0
LONG = {"target_accuracy": 0.999, "budget": {"trials": 6, "max_train_seconds": LONG_TRIAL_S},
        "asha": {"enabled": False}}  # an unreachable target: every trial trains its whole budget
DESCRIPTIONS = {
    "smoke": "search_spaces/smoke.yaml",
    "fast": "search_spaces/fast.yaml",
    "long": f"fast.yaml with {LONG}, fixed.epochs 1000: every trial trains its whole {LONG_TRIAL_S:g} s",
}


def space(name: str) -> tuple[dict, str]:
    """(space file data with confirmation off, the path it is reported under)."""
    if name.endswith((".yaml", ".yml")):  # a space file of the user's
        data = yaml.safe_load(Path(name).read_text())
        data.update(name=f"overhead-{Path(name).stem}", confirm={**data.get("confirm", {}), "repeats": 0})
        return data, name
    path = ROOT / "search_spaces" / f"{'fast' if name == 'long' else name}.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(name=f"overhead-{name}", confirm={**data.get("confirm", {}), "repeats": 0})
    if name == "long":
        data.update(LONG)
        data["fixed"]["epochs"] = 1000
        return data, "long.yaml"
    return data, str(path.relative_to(ROOT))


def measure(name: str, folder: Path) -> dict:
    data, path = space(name)
    spec = spec_from_dict(data, path)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    start = time.perf_counter()
    outcome = run_search(spec, yaml.safe_dump(data), path, tracking_uri=uri, storage_path=str(folder / "runs"),
                         console=io.StringIO())
    wall = time.perf_counter() - start
    rows = outcome.rows
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = [client.get_run(r.run_id).info for r in rows]
    span = (max(i.end_time for i in runs) - min(i.start_time for i in runs)) / 1000
    return overhead(name, wall, [r.wall_seconds or 0.0 for r in rows], span)


def measure_without_search(name: str) -> dict:
    """--no-search: the space's baseline trained once in this process, no Ray, Optuna or MLflow; the "search"
    is the trainer call, so its overhead is the call's own around the trainer's `wall_seconds`."""
    from autospeed.train.trainer import train

    data, path = space(name)
    recipe = spec_from_dict(data, path).recipe_for({}, baseline=True)
    start = time.perf_counter()
    result = train(recipe)
    wall = time.perf_counter() - start
    return overhead(name, wall, [result.wall_seconds], wall)


def overhead(name: str, wall: float, trial_walls: list[float], span: float) -> dict:
    """The row of one search: `wall` its whole run, `trial_walls` its trials' wall seconds, `span` first trial
    start to last trial end."""
    trial_wall = sum(trial_walls)
    n = len(trial_walls)
    return {
        "space": name, "trials": n, "search_wall_s": wall, "trials_wall_s": trial_wall,
        "mean_trial_s": trial_wall / n, "overhead_per_trial_s": (wall - trial_wall) / n,
        "overhead_fraction": (wall - trial_wall) / wall,
        "overhead_per_trial_after_start_s": (span - trial_wall) / n,
        "overhead_fraction_after_start": (span - trial_wall) / span,
    }


def verdict(r: dict) -> str:
    met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    text = (f"- {r['space']}: {r['overhead_per_trial_s']:.2f} s per trial including Ray's start "
            f"({met(r['overhead_per_trial_s'] <= GOAL_PER_TRIAL_S)}), {r['overhead_per_trial_after_start_s']:.2f} s "
            f"after it ({met(r['overhead_per_trial_after_start_s'] <= GOAL_PER_TRIAL_S)}); goal <= "
            f"{GOAL_PER_TRIAL_S:g} s per trial")
    if r["mean_trial_s"] >= LONG_TRIAL_S:
        text += (f". Trials of >= {LONG_TRIAL_S:g} s: {100 * r['overhead_fraction']:.1f}% of wall time including "
                 f"Ray's start ({met(r['overhead_fraction'] <= GOAL_FRACTION)}), "
                 f"{100 * r['overhead_fraction_after_start']:.1f}% after it "
                 f"({met(r['overhead_fraction_after_start'] <= GOAL_FRACTION)}); goal <= {100 * GOAL_FRACTION:g}%")
    return text + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="+", default=["smoke", "fast", "long"],
                        help="smoke, fast (search_spaces/*.yaml), long (fast.yaml with 10 s trials) or a space file")
    parser.add_argument("--out", help="also write the results as Markdown to this file")
    parser.add_argument("--no-search", action="store_true",
                        help="a smoke run of the table: train each space's baseline once here, no search")
    args = parser.parse_args()
    unknown = [n for n in args.spaces if n not in DESCRIPTIONS and not n.endswith((".yaml", ".yml"))]
    if unknown:
        parser.error(f"--spaces: {unknown} are neither {', '.join(DESCRIPTIONS)} nor a .yaml space file")
    print(provenance(end=False), flush=True)
    rows = []
    with cpu_lock(exclusive=True):
        for name in args.spaces:
            if args.no_search:
                rows.append(measure_without_search(name))
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    rows.append(measure(name, Path(tmp)))
            print(f"{name}: {rows[-1]}", flush=True)
    cols = list(rows[0])
    lines = ([] if not args.no_search else [
        "**--no-search: no search ran.** Each space's baseline trained once in this process (no Ray, Optuna or "
        "MLflow); a row's overhead is the trainer call's own around its `wall_seconds`, not a search's.", ""]) + [
        "Spaces (confirmation off in each): " + "; ".join(f"{n}: {DESCRIPTIONS.get(n, 'a space file')}"
                                                          for n in args.spaces) + ".",
        "overhead = search wall seconds - sum of the trials' wall seconds (trainer `wall_seconds`); "
        "\"after start\" leaves out Ray's one-off start and the dataset preparation (first trial start to "
        "last trial end).", "",
        "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()) + " |"
              for r in rows]
    lines += ["", *map(verdict, rows)]
    emit_table("Search orchestration overhead", lines, args.out)


if __name__ == "__main__":
    main()
