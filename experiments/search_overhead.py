"""Orchestration overhead of a search: what Ray, Optuna and MLflow cost per trial.

    python experiments/search_overhead.py                  # smoke and fast
    python experiments/search_overhead.py --spaces smoke   # one of them
    python experiments/search_overhead.py --spaces long    # fast.yaml with 10 s trials

overhead per trial = (search wall seconds - sum of the trials' wall seconds) / trials,
where a trial's wall seconds is the trainer's `wall_seconds` (building the model,
training, evaluating). The search's wall seconds run from `run_search` being
called to it returning: Ray's start, the dataset preparation, scheduling,
Optuna's sampling and MLflow logging are all overhead. Also printed: the same
without Ray's one-off start (first trial start to last trial end).
Goal (issue 3): <= 1 s per trial on 2 cores and <= 10% of wall time when trials
last >= 10 s. Confirmation runs are not part of this measurement.
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
from _common import machine_header  # noqa: E402

from autospeed.search import run_search  # noqa: E402
from autospeed.space import load_spec, spec_from_dict  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def long_spec():
    """fast.yaml with trials of >= 10 s each: an unreachable target, so every trial trains its
    whole 10 s budget; ASHA and confirmation off, 6 trials."""
    data = yaml.safe_load((ROOT / "search_spaces" / "fast.yaml").read_text())
    data.update(name="overhead-long", target_accuracy=0.999, budget={"trials": 6, "max_train_seconds": 10},
                asha={"enabled": False}, confirm={"repeats": 0})
    data["fixed"]["epochs"] = 1000
    return spec_from_dict(data, "long (fast.yaml, 10 s trials)"), yaml.safe_dump(data)


def measure(space_name: str, folder: Path) -> dict:
    if space_name == "long":
        spec, text = long_spec()
        path = Path("long.yaml")
    else:
        path = ROOT / "search_spaces" / f"{space_name}.yaml"
        spec = load_spec(path).model_copy(update={"name": f"overhead-{space_name}"})
        text = path.read_text()
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    start = time.perf_counter()
    outcome = run_search(spec, text, str(path), tracking_uri=uri, storage_path=str(folder / "runs"),
                         console=io.StringIO())
    wall = time.perf_counter() - start
    rows = outcome.rows
    trial_wall = sum(r.wall_seconds or 0.0 for r in rows)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = [client.get_run(r.run_id).info for r in rows]
    span = (max(i.end_time for i in runs) - min(i.start_time for i in runs)) / 1000
    n = len(rows)
    return {
        "space": space_name, "trials": n, "search_wall_s": wall, "trials_wall_s": trial_wall,
        "mean_trial_s": trial_wall / n, "overhead_per_trial_s": (wall - trial_wall) / n,
        "overhead_fraction": (wall - trial_wall) / wall,
        "overhead_per_trial_after_start_s": (span - trial_wall) / n,
        "overhead_fraction_after_start": (span - trial_wall) / span,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="+", default=["smoke", "fast", "long"],
                        help="smoke, fast (search_spaces/*.yaml) or long (fast.yaml with 10 s trials)")
    args = parser.parse_args()
    print(f"# search overhead\n{machine_header()}")
    rows = []
    for name in args.spaces:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(measure(name, Path(tmp)))
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")


if __name__ == "__main__":
    main()
