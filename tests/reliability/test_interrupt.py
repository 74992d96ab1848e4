"""Interruptions: Ctrl-C, SIGTERM and SIGKILL of a running search, then --resume."""

from __future__ import annotations

import os
import signal

from .conftest import autospeed, cli_env, client_for, error_lines, search_runs, wait_until, write_space

NAME = "interrupted"
TRIALS = 3


def _space(folder):
    # Never reaches 0.999 and ASHA is off, so every trial trains its full 2 s: long enough to interrupt.
    return write_space(folder, {
        "name": NAME, "workload": "digits", "target_accuracy": 0.999,
        "budget": {"trials": TRIALS, "max_train_seconds": 2}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": 1, "repeats": 0},
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 200, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.01, 0.3]}, "batch_size": {"choice": [32, 64]}},
    })


def _args(d, *extra):
    return ["search", "--space", str(d / "space.yaml"), "--tracking-uri", f"sqlite:///{d}/mlflow.db",
            "--storage-path", str(d / "store"), *extra]


def _trials(d):
    return search_runs(f"sqlite:///{d}/mlflow.db", NAME)[1]


def _mid_trial(d, proc, finished_at_least: int):
    """Wait until `finished_at_least` trials ended and another one is training."""
    # Read the store only once the search has created it (two first-time writers race on the schema).
    wait_until(lambda: f"search '{NAME}'" in proc.stdout or proc.proc.poll() is not None, what="the search header")
    assert proc.proc.poll() is None, proc.stderr

    def ready():
        trials = _trials(d)
        done = [t for t in trials if t.info.status in ("FINISHED", "FAILED")]
        running = [t for t in trials if t.info.status == "RUNNING" and "val_accuracy" in t.data.metrics]
        return (done, running[0]) if len(done) >= finished_at_least and running else None
    return wait_until(ready, what="a trial in the middle of training")


def _finished_fingerprint(trials):
    return {t.info.run_id: (t.info.end_time, len(t.data.metrics)) for t in trials
            if t.info.status in ("FINISHED", "FAILED")}


def _assert_interrupted(proc, d, victim_run_id):
    assert proc.wait() == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "--resume" in proc.stderr.strip().splitlines()[-1]
    trials = {t.info.run_id: t for t in _trials(d)}
    victim = trials[victim_run_id]
    assert victim.info.status == "KILLED" and victim.data.tags["autospeed.status"] == "killed"
    assert not [t for t in trials.values() if t.info.status == "RUNNING"]
    parents = search_runs(f"sqlite:///{d}/mlflow.db", NAME)[0]
    assert len(parents) == 1 and parents[0].info.status == "KILLED"
    for t in trials.values():  # the leaderboard of what finished is printed
        if t.info.status == "FINISHED":
            label = "baseline" if t.data.tags["autospeed.baseline"] == "true" else t.data.tags["autospeed.trial_id"][-14:]
            assert label in proc.stdout


def test_ctrl_c_then_sigterm_then_resume_finishes(tmp_path, start_cli):
    _space(tmp_path)
    env = cli_env()

    first = start_cli(*_args(tmp_path), cwd=tmp_path, env=env)
    _, victim = _mid_trial(tmp_path, first, 1)
    first.ctrl_c()
    _assert_interrupted(first, tmp_path, victim.info.run_id)
    kept = _finished_fingerprint(_trials(tmp_path))

    second = start_cli(*_args(tmp_path, "--resume"), cwd=tmp_path, env=env)
    _, victim = _mid_trial(tmp_path, second, len(kept) + 1)
    os.kill(second.proc.pid, signal.SIGTERM)  # `kill PID`, a scheduler's stop: same as Ctrl-C
    _assert_interrupted(second, tmp_path, victim.info.run_id)
    kept = _finished_fingerprint(_trials(tmp_path))

    third = autospeed(*_args(tmp_path, "--resume"), cwd=tmp_path, env=env)
    assert third.returncode == 0, third.stderr
    trials = _trials(tmp_path)
    assert len(trials) == TRIALS and all(t.info.status == "FINISHED" for t in trials)
    assert {t.data.tags["autospeed.status"] for t in trials} == {"not_reached"}
    fingerprint = _finished_fingerprint(trials)
    assert {k: fingerprint[k] for k in kept} == kept  # nothing that had finished ran again
    parents = search_runs(f"sqlite:///{tmp_path}/mlflow.db", NAME)[0]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"


def test_sigkill_then_resume_loses_nothing(tmp_path, start_cli):
    _space(tmp_path)
    env = cli_env()
    victim_proc = start_cli(*_args(tmp_path), cwd=tmp_path, env=env)
    _, victim = _mid_trial(tmp_path, victim_proc, 1)
    os.kill(victim_proc.proc.pid, signal.SIGKILL)
    victim_proc.wait()
    victim_proc.reap()  # Ray's processes of the dead search
    before = _trials(tmp_path)
    assert any(t.info.status == "RUNNING" for t in before)  # the lie a SIGKILL leaves behind
    kept = _finished_fingerprint(before)

    resumed = autospeed(*_args(tmp_path, "--resume"), cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert not error_lines(resumed.stderr)
    trials = _trials(tmp_path)
    assert not [t for t in trials if t.info.status == "RUNNING"]
    fingerprint = _finished_fingerprint(trials)
    assert {k: fingerprint[k] for k in kept} == kept  # no finished trial lost or re-run
    done = [t for t in trials if t.data.tags["autospeed.status"] != "killed"]
    assert len(done) == TRIALS and len({t.data.tags["autospeed.trial_id"] for t in done}) == TRIALS
    assert all(t.info.status == "KILLED" for t in trials if t not in done)
    parents = search_runs(f"sqlite:///{tmp_path}/mlflow.db", NAME)[0]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"


def test_ctrl_c_during_confirmation_keeps_the_search_and_resume_confirms(tmp_path, start_cli):
    name = "confirming"
    write_space(tmp_path, {
        "name": name, "workload": "digits", "target_accuracy": 0.9,
        "budget": {"trials": 2, "max_train_seconds": 3}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": 1, "repeats": 15},
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 30, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.05, 0.2]}, "batch_size": {"choice": [32, 64]}},
    })
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = cli_env()
    args = ["search", "--space", str(tmp_path / "space.yaml"), "--tracking-uri", uri,
            "--storage-path", str(tmp_path / "store")]
    first = start_cli(*args, cwd=tmp_path, env=env)
    wait_until(lambda: "] confirm " in first.stdout or first.proc.poll() is not None, what="confirmation runs")
    first.ctrl_c()  # Ray Tune's own Ctrl-C handler must be gone by now

    assert first.wait() == 130, first.stderr
    assert "Traceback" not in first.stderr
    assert "--resume" in first.stderr.strip().splitlines()[-1]
    assert "best recipe:" in first.stdout  # the search's best is still written
    runs = client_for(uri).search_runs([client_for(uri).get_experiment_by_name(name).experiment_id],
                                       max_results=1000)
    assert not [r for r in runs if r.info.status == "RUNNING"]
    parent = next(r for r in runs if r.data.tags["autospeed.kind"] == "search")
    assert parent.info.status == "FINISHED"  # every trial ended; only the confirmation was cut short
    confirms = [r for r in runs if r.data.tags["autospeed.kind"] == "confirm"]
    assert 2 <= len(confirms) < 2 * 15 and "confirm_speedup_vs_baseline" not in parent.data.metrics

    resumed = autospeed(*args, "--resume", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "confirmed best" in resumed.stdout
    parent = client_for(uri).get_run(parent.info.run_id)
    assert parent.data.metrics["confirm_repeats"] == 15


CTRL_C_DURING_WRITES = """
import os, random, signal, sys, threading, time
from autospeed import tracking as t
from autospeed.recipe import Recipe
from autospeed.trainer import train
from autospeed.workloads import load_workload

client = t.connect(sys.argv[1])
exp = t.experiment_id(client, "writes")
recipe = Recipe.model_validate({"workload": "digits", "target_accuracy": 0.9, "max_train_seconds": 1, "epochs": 1})
result = train(recipe, load_workload("digits", {}))
random.seed(0)
for i in range(15):
    run_id = client.create_run(exp).info.run_id
    threading.Timer(random.uniform(0.001, 0.03), os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        t.finish_run(client, run_id, recipe, result)
        time.sleep(0.05)
    except KeyboardInterrupt:
        t.mark_killed(client, run_id)  # what an interrupted confirmation does
print("done")
"""


def test_ctrl_c_in_the_middle_of_a_tracking_write_leaves_no_run_running(tmp_path):
    """Ctrl-C inside an MLflow write used to leave the SQLite store locked: the interrupted
    run could not be marked KILLED and stayed RUNNING (seen as a flaky confirmation test)."""
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    p = subprocess.run([sys.executable, "-c", CTRL_C_DURING_WRITES, uri], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, env=cli_env())
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    runs = client_for(uri).search_runs([client_for(uri).get_experiment_by_name("writes").experiment_id])
    assert len(runs) == 15 and not [r for r in runs if r.info.status == "RUNNING"]
