"""Interruptions: Ctrl-C, SIGTERM and SIGKILL of a running search, then --resume.

Each test establishes the state it interrupts (GATED_PLUGIN holds a run in the middle of
training until the test opens its gate) and never races a clock: on a slow or busy machine
the signal still lands where the test says it does."""

from __future__ import annotations

import os
import signal

import pytest

from .conftest import (Gate, autospeed, cli_env, client_for, error_lines, search_runs, sigkill_with_state_whole,
                       wait_until, write_space)

# Each test runs the CLI up to three times (Ray started each time): on a busy 2-core machine that
# can pass pytest's default 600 s ceiling (a hang guard), so these get a higher one.
pytestmark = pytest.mark.timeout(1800)

NAME = "interrupted"
TRIALS = 3


def _space(folder) -> Gate:
    """Every trial has a gate (GATED_PLUGIN): one the test leaves closed is a trial in the middle of
    training, evaluated at least once, and stays one, however fast or slow the machine; one the test
    opens reaches the target at its next evaluation. The budget and epochs are never what ends a trial."""
    gate = Gate(folder)
    write_space(folder, {
        "name": NAME, **gate.workload(), "target_accuracy": 0.9,
        "budget": {"trials": TRIALS, "max_train_seconds": 600}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": 1, "repeats": 0},
        "probe": {"enabled": False},  # its model builds would pass the gates the test counts on
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 1000, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.01, 0.3]}, "batch_size": {"choice": [32, 64]}},
    })
    return gate


def _args(d, *extra):
    return ["search", "--space", str(d / "space.yaml"), "--tracking-uri", f"sqlite:///{d}/mlflow.db",
            "--storage-path", str(d / "store"), *extra]


def _trials(d):
    return search_runs(f"sqlite:///{d}/mlflow.db", NAME)[1]


def _mid_trial(d, gate, proc, finished: int, build: int):
    """Wait until `finished` trials ended and model build `build` is held at its closed gate; return
    its trial's run: evaluated at least once, in the middle of training, and staying there."""
    gate.wait_for(build, proc)

    def ready():
        trials = _trials(d)
        done = [t for t in trials if t.info.status in ("FINISHED", "FAILED")]
        running = [t for t in trials if t.info.status == "RUNNING" and "val_accuracy" in t.data.metrics]
        return running[0] if len(done) == finished and len(running) == 1 else None
    return wait_until(ready, what="the gated trial's run, with its first evaluation")


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
    gate = _space(tmp_path)
    env = cli_env(pythonpath=gate.plugin_dir)

    gate.open(1)  # the first trial reaches the target; the second is held at its gate
    first = start_cli(*_args(tmp_path), cwd=tmp_path, env=env)
    victim = _mid_trial(tmp_path, gate, first, 1, build=2)
    first.ctrl_c()
    _assert_interrupted(first, tmp_path, victim.info.run_id)
    kept = _finished_fingerprint(_trials(tmp_path))
    assert len(kept) == 1 and gate.builds() == 2

    gate.open(3)  # the resumed search's first build (either trial left) ends; its second is held
    second = start_cli(*_args(tmp_path, "--resume"), cwd=tmp_path, env=env)
    victim = _mid_trial(tmp_path, gate, second, len(kept) + 1, build=4)
    os.kill(second.proc.pid, signal.SIGTERM)  # `kill PID`, a scheduler's stop: same as Ctrl-C
    _assert_interrupted(second, tmp_path, victim.info.run_id)
    kept = _finished_fingerprint(_trials(tmp_path))
    assert len(kept) == 2 and gate.builds() == 4

    gate.open()
    third = autospeed(*_args(tmp_path, "--resume"), cwd=tmp_path, env=env)
    assert third.returncode == 0, third.stderr
    trials = _trials(tmp_path)
    assert len(trials) == TRIALS and all(t.info.status == "FINISHED" for t in trials)
    assert {t.data.tags["autospeed.status"] for t in trials} == {"reached"}
    fingerprint = _finished_fingerprint(trials)
    assert {k: fingerprint[k] for k in kept} == kept  # nothing that had finished ran again
    assert gate.builds() == 5  # only the one trial left unfinished trained again
    parents = search_runs(f"sqlite:///{tmp_path}/mlflow.db", NAME)[0]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"


def _sigkill(proc, d, whole_group: bool) -> None:
    sigkill_with_state_whole(proc, next((d / "store" / NAME).iterdir()), whole_group)


@pytest.mark.parametrize("killed", ["driver", "process group"])
def test_sigkill_then_resume_loses_nothing(tmp_path, start_cli, killed):
    gate = _space(tmp_path)
    env = cli_env(pythonpath=gate.plugin_dir)
    gate.open(1)
    victim_proc = start_cli(*_args(tmp_path), cwd=tmp_path, env=env)
    _mid_trial(tmp_path, gate, victim_proc, 1, build=2)
    _sigkill(victim_proc, tmp_path, whole_group=killed == "process group")
    victim_proc.wait()
    victim_proc.reap()  # Ray's processes of the dead search
    before = _trials(tmp_path)
    assert any(t.info.status == "RUNNING" for t in before)  # the lie a SIGKILL leaves behind
    kept = _finished_fingerprint(before)

    gate.open()
    resumed = autospeed(*_args(tmp_path, "--resume"), cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert not error_lines(resumed.stderr)
    trials = _trials(tmp_path)
    assert not [t for t in trials if t.info.status == "RUNNING"]
    fingerprint = _finished_fingerprint(trials)
    assert {k: fingerprint[k] for k in kept} == kept  # no finished trial lost or re-run
    assert gate.builds() == 2 + TRIALS - len(kept)  # only the unfinished trials trained again
    done = [t for t in trials if t.data.tags["autospeed.status"] != "killed"]
    assert len(done) == TRIALS and len({t.data.tags["autospeed.trial_id"] for t in done}) == TRIALS
    assert all(t.info.status == "KILLED" for t in trials if t not in done)
    parents = search_runs(f"sqlite:///{tmp_path}/mlflow.db", NAME)[0]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"


# Confirmation runs train with new seeds, recipe seed + 1000 + repeat (the search's trials use the
# recipe seed, 0): seeds from 1001 have a gate, so repeat 0 of both recipes ends and repeat 1 of the
# first one is held in the middle of training from its first step.
CONFIRM_GATED_FROM_SEED = 1001
REPEATS = 3


def test_ctrl_c_during_confirmation_keeps_the_search_and_resume_confirms(tmp_path, start_cli):
    name = "confirming"
    gate = Gate(tmp_path)
    write_space(tmp_path, {
        "name": name, **gate.workload(gate_from_seed=CONFIRM_GATED_FROM_SEED, evaluations=0), "target_accuracy": 0.9,
        "budget": {"trials": 2, "max_train_seconds": 600}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": 1, "repeats": REPEATS},
        "probe": {"enabled": False},  # its model builds would pass the gates the test counts on
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 1000, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.05, 0.2]}, "batch_size": {"choice": [32, 64]}},
    })
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = cli_env(pythonpath=gate.plugin_dir)
    args = ["search", "--space", str(tmp_path / "space.yaml"), "--tracking-uri", uri,
            "--storage-path", str(tmp_path / "store")]
    first = start_cli(*args, cwd=tmp_path, env=env)
    wait_until(lambda: gate.waiting() or first.proc.poll() is not None, what="a confirmation run held at its gate")
    assert first.proc.poll() is None, first.stdout + first.stderr
    assert first.stdout.count("] confirm ") == 1  # repeat 0 of the best recipe (the baseline's is its trial)
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
    assert sorted(r.info.status for r in confirms) == ["FINISHED", "KILLED"]
    assert "confirm_speedup_vs_baseline" not in parent.data.metrics

    gate.open()
    resumed = autospeed(*args, "--resume", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "confirmed best" in resumed.stdout
    parent = client_for(uri).get_run(parent.info.run_id)
    assert parent.data.metrics["confirm_repeats"] == REPEATS


CTRL_C_DURING_WRITES = """
import signal, sys
import sqlalchemy
from autospeed.track import layout as t
from autospeed.recipe import Recipe
from autospeed.train.trainer import train
from autospeed.workloads import load_workload

client = t.connect(sys.argv[1])
exp = t.experiment_id(client, "writes")
recipe = Recipe.model_validate({"workload": "digits", "target_accuracy": 0.9, "max_train_seconds": 1, "epochs": 1})
result = train(recipe, load_workload("digits", {}))
statements, ctrl_c_after, sent = 0, None, 0


@sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "after_cursor_execute")
def after_statement(*_):
    global statements, sent
    statements += 1
    if statements == ctrl_c_after:
        sent += 1
        signal.raise_signal(signal.SIGINT)  # Ctrl-C with this statement's transaction open


def finish(run_id, ctrl_c=None):
    global statements, ctrl_c_after
    statements, ctrl_c_after = 0, ctrl_c
    try:
        t.finish_run(client, run_id, recipe, result)
    finally:
        ctrl_c_after = None
    return statements


n = finish(client.create_run(exp).info.run_id)  # uninterrupted: how many SQL statements finish_run makes
interrupted = 0
for k in range(1, n + 1):  # Ctrl-C after each of them in turn
    run_id = client.create_run(exp).info.run_id
    try:
        finish(run_id, ctrl_c=k)
    except KeyboardInterrupt:
        interrupted += 1
        t.mark_killed(client, run_id)  # what an interrupted confirmation does
print(f"{n} statements, {sent} Ctrl-C sent, {interrupted} interrupted")
"""


def test_ctrl_c_in_the_middle_of_a_tracking_write_leaves_no_run_running(tmp_path):
    """Ctrl-C inside an MLflow write used to leave the SQLite store locked: the interrupted
    run could not be marked KILLED and stayed RUNNING (seen as a flaky confirmation test).
    Ctrl-C lands after each SQL statement of finish_run in turn, its transaction open: every
    one must still interrupt (held, then delivered), and every run must end."""
    import re
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    p = subprocess.run([sys.executable, "-c", CTRL_C_DURING_WRITES, uri], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, env=cli_env())
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    n, sent, interrupted = map(int, re.fullmatch(r"(\d+) statements, (\d+) Ctrl-C sent, (\d+) interrupted",
                                                 p.stdout.strip()).groups())
    assert n >= 3 and sent == interrupted == n, p.stdout
    runs = client_for(uri).search_runs([client_for(uri).get_experiment_by_name("writes").experiment_id],
                                       max_results=1000)
    assert len(runs) == n + 1 and not [r for r in runs if r.info.status == "RUNNING"]
    assert sum(r.info.status == "KILLED" for r in runs) == n
