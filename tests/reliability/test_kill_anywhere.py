"""A search SIGKILLed at points drawn by a seeded RNG, each followed by `--resume`, finishes with every
finished trial kept once: one parent run, and the ledger, the MLflow trial runs and the Optuna study
holding the same trials (docs/design.md "Crash anywhere, lose nothing").

Each kill lands where the test says (kill_points.py wraps the driver's own functions), never at a
moment a clock picked. One of them tears Ray Tune's experiment state mid-copy, so that resume must
rebuild the search from autospeed's own records; one lands before the search wrote anything."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import cli_env, client_for, search_runs, write_plugin, write_space

pytestmark = pytest.mark.timeout(1800)

NAME = "killed"
TRIALS = 6
SEED = 5  # of the kill points' draw: then tune_state_copy:2, before_tell:2, mlflow_final:1
KILLS = 6


def _kill_plan(seed: int) -> list[tuple[str, int]]:
    """KILLS points (point, its Nth pass): first one before the search wrote anything (start), one while MLflow
    creates the new tracking store (store_migration), one between the search's state file and its parent run
    (state_written: only a new search passes these two), then in a seeded order one
    inside Tune's state write and points drawn from the trials', each in the first or second trial a driver
    runs. Each kill must land (the search has trials left for it): the test fails on a driver not killed."""
    from .kill_points import POINTS

    rng = random.Random(seed)
    first = ["start", "store_migration", "state_written"]
    # (production_run: confirmation's and ablation's, which this search has none of: test_kill_confirmation.py)
    trial_points = [p for p in POINTS if p not in (*first, "tune_state_copy", "production_run")]
    # Tune's state torn once a trial finished: the rebuilt Tuner runs only the rest, and a later restore of it
    # must count from there (it once ran the search's whole count again)
    rest = [(p, rng.choice([1, 2])) for p in rng.sample(trial_points, KILLS - 4)] + [("tune_state_copy", 2)]
    rng.shuffle(rest)
    return [(p, 1) for p in first] + rest


def _space(d: Path) -> Path:
    write_plugin(d)
    return write_space(d, {
        "name": NAME, "workload": "faulty_plugin:faulty", "workload_options": {"oom_above": 10_000},
        "target_accuracy": 0.9, "budget": {"trials": TRIALS, "max_train_seconds": 60},
        "asha": {"enabled": False}, "sampler": {"kind": "random", "seed": 0},
        "confirm": {"top_k": 1, "repeats": 0}, "probe": {"enabled": False},
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 20, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.02, 0.2]}, "batch_size": {"choice": [16, 32, 64]}},
    })


def test_a_search_killed_at_seeded_points_resumes_with_every_trial_once(tmp_path):
    d = tmp_path
    space = _space(d)
    uri = f"sqlite:///{d}/mlflow.db"
    args = ["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(d / "store"), "--resume"]
    env = cli_env(pythonpath=d)
    hook = Path(__file__).with_name("kill_points.py")
    outputs, kept = [], {}
    for point, n in _kill_plan(SEED):
        p = subprocess.run([sys.executable, str(hook), point, str(n), "--", *args], cwd=d, env=env,
                           capture_output=True, text=True, timeout=600)
        outputs.append(f"--- {point}:{n} rc={p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}")
        assert p.returncode == -signal.SIGKILL, "\n".join(outputs)  # the kill landed where the plan says
        kept.update(_ledger(d))  # every trial finished so far, as the ledger recorded it
    done = subprocess.run([sys.executable, "-m", "autospeed", *args], cwd=d, env=env, capture_output=True,
                          text=True, timeout=600)
    outputs.append(f"--- final rc={done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}")
    assert done.returncode == 0, "\n".join(outputs)
    every = "\n".join(outputs)
    assert "rebuilt the search from its own records" in every  # the torn Tune state was rebuilt, and said so

    parents, trials = search_runs(uri, NAME)
    assert len(parents) == 1, every  # one parent run, however often killed
    from autospeed.search.records import audit
    from autospeed.search.storage import latest_search_dir

    folder = latest_search_dir(str(d / "store"), NAME)
    records = audit(folder, NAME, client_for(uri), parents[0].info.run_id)
    assert records.agree, records.describe() + "\n" + every
    assert len(records.ledger) == TRIALS, records.describe()
    assert len(trials) == TRIALS  # no trial run left over from a killed attempt
    assert sum(t.data.tags.get("autospeed.baseline") == "true" for t in trials) == 1
    assert all(t.info.status == "FINISHED" for t in trials), [t.info.status for t in trials]
    final = _ledger(d)
    assert {k: final.get(k) for k in kept} == kept  # no finished trial lost, or trained again (its entry rewritten)


def _ledger(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (d / "store" / NAME).glob("*/finished/*.json")}
