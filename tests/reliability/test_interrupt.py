"""Interruptions: Ctrl-C and SIGTERM of a running search, then --resume (SIGKILL at any instant:
test_kill_anywhere.py).

Each test establishes the state it interrupts (GATED_PLUGIN holds a run in the middle of
training until the test opens its gate) and never races a clock: on a slow or busy machine
the signal still lands where the test says it does."""

from __future__ import annotations

import os
import signal

import pytest

from .conftest import Gate, autospeed, cli_env, client_for, search_runs, wait_until, write_space

# Each test runs the CLI three or four times (Ray started each time): on a busy 2-core machine that
# can pass pytest's default 600 s ceiling (a hang guard), so these get a higher one.
pytestmark = pytest.mark.timeout(1800)

NAME = "interrupted"
TRIALS = 3
# Confirmation (after the trials) of the best recipe and the baseline, REPEATS fresh runs each: the best recipe's,
# then the baseline's. One round is enough to interrupt it in the middle (the baseline's run) and resume it; each
# run more is a process start more (a resume's later rounds, kept runs and seeds: test_kill_confirmation.py).
REPEATS = 1
# ...each with a new seed, recipe seed (0 here) + 1000 + repeat: never one a trial trained with.
CONFIRM_SEED = 1000


def _space(folder, repeats: int = 0) -> Gate:
    """Every trial has a gate (GATED_PLUGIN): one the test leaves closed is a trial in the middle of
    training, evaluated at least once, and stays one, however fast or slow the machine; one the test
    opens reaches the target at its next evaluation. The budget and epochs are never what ends a trial.
    Confirmation runs (`repeats` > 0) are model builds too, each with its gate."""
    gate = Gate(folder)
    write_space(folder, {
        "name": NAME, **gate.workload(), "target_accuracy": 0.9,
        "budget": {"trials": TRIALS, "max_train_seconds": 600}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": 1, "repeats": repeats},
        "probe": {"enabled": False},  # its model builds would pass the gates the test counts on
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 1000, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.01, 0.3]}, "batch_size": {"choice": [32, 64]}},
    })
    return gate


def _args(d, *extra):
    return ["search", "--space", str(d / "space.yaml"), "--tracking-uri", f"sqlite:///{d}/mlflow.db",
            "--storage-path", str(d / "store"), *extra]


def _runs(d, kind: str | None = None) -> list:
    """Every run of the search's experiment (of one `autospeed.kind`), oldest first."""
    c = client_for(f"sqlite:///{d}/mlflow.db")
    runs = c.search_runs([c.get_experiment_by_name(NAME).experiment_id], order_by=["attributes.start_time ASC"],
                         max_results=1000)
    return [r for r in runs if kind is None or r.data.tags.get("autospeed.kind") == kind]


def _trials(d):
    return search_runs(f"sqlite:///{d}/mlflow.db", NAME)[1]


def _parent(d):
    parents = search_runs(f"sqlite:///{d}/mlflow.db", NAME)[0]
    assert len(parents) == 1, [p.info.run_id for p in parents]  # one parent run, however often resumed
    return parents[0]


def _mid_trial(d, gate, proc, finished: int, build: int):
    """Wait until `finished` trials ended and model build `build` is held at its closed gate; return
    its trial's run: evaluated at least once, in the middle of training, and staying there."""
    gate.wait_for(build, proc)

    def ready():
        trials = _trials(d)
        done = [t for t in trials if t.info.status in ("FINISHED", "FAILED")]
        running = [t for t in trials if t.info.status == "RUNNING" and "val_accuracy" in t.data.metrics]
        return running[0] if len(done) == finished and len(running) == 1 else None
    return wait_until(ready, every=0.25, what="the gated trial's run, with its first evaluation")


def _finished_fingerprint(trials):
    return {t.info.run_id: (t.info.end_time, len(t.data.metrics)) for t in trials
            if t.info.status in ("FINISHED", "FAILED")}


def _assert_kept(d, kept: dict) -> dict:
    """No trial that had finished is lost or ran again; the fingerprint of every finished trial now."""
    fingerprint = _finished_fingerprint(_trials(d))
    assert {k: fingerprint.get(k) for k in kept} == kept
    return fingerprint


def _assert_interrupted(proc, d, victim_run_id):
    assert proc.wait() == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "--resume" in proc.stderr.strip().splitlines()[-1]
    trials = {t.info.run_id: t for t in _trials(d)}
    victim = trials[victim_run_id]
    assert victim.info.status == "KILLED" and victim.data.tags["autospeed.status"] == "killed"
    assert not [t for t in trials.values() if t.info.status == "RUNNING"]
    assert _parent(d).info.status == "KILLED"
    for t in trials.values():  # the leaderboard of what finished is printed
        if t.info.status == "FINISHED":
            baseline = t.data.tags["autospeed.baseline"] == "true"
            label = "baseline" if baseline else t.data.tags["autospeed.trial_id"][-14:]
            assert label in proc.stdout


def _builds(gate) -> list[tuple[int, int]]:
    """(build, seed) of every model build so far, in order."""
    log = gate.dir / "builds.log"
    return [(int(n), int(seed)) for n, _, seed in (line.split() for line in log.read_text().splitlines())]


def test_ctrl_c_sigterm_and_ctrl_c_in_confirmation_each_resume_where_they_stopped(tmp_path, start_cli, new_store):
    """One search, interrupted at each stage and resumed each time: Ctrl-C in the middle of a trial,
    SIGTERM (`kill PID`, a scheduler's stop) in the middle of a trial of the resumed search, Ctrl-C in
    the middle of a confirmation run once every trial has ended; the last resume confirms and ends."""
    new_store(tmp_path)
    gate = _space(tmp_path, repeats=REPEATS)
    env = cli_env(pythonpath=gate.plugin_dir)

    # 1. Ctrl-C: the first trial reached the target; the second is held at its gate (build 2).
    gate.open(1)
    first = start_cli(*_args(tmp_path), cwd=tmp_path, env=env)
    victim = _mid_trial(tmp_path, gate, first, 1, build=2)
    first.ctrl_c()
    _assert_interrupted(first, tmp_path, victim.info.run_id)
    kept = _finished_fingerprint(_trials(tmp_path))
    assert len(kept) == 1 and gate.builds() == 2

    # 2. SIGTERM: the resumed search's first build (either trial left) ends; its second is held.
    gate.open(3)
    second = start_cli(*_args(tmp_path, "--resume"), cwd=tmp_path, env=env)
    victim = _mid_trial(tmp_path, gate, second, len(kept) + 1, build=4)
    os.kill(second.proc.pid, signal.SIGTERM)  # `kill PID`, a scheduler's stop: same as Ctrl-C
    _assert_interrupted(second, tmp_path, victim.info.run_id)
    kept = _assert_kept(tmp_path, kept)
    assert len(kept) == 2 and gate.builds() == 4

    # 3. Ctrl-C in confirmation: the trial left ends (build 5), then repeat 0 of the best recipe
    # (build 6); repeat 0 of the baseline (build 7, a fresh process: no search trial is a sample) is held.
    gate.open(5, 6)
    third = start_cli(*_args(tmp_path, "--resume"), cwd=tmp_path, env=env)
    gate.wait_for(7, third)
    assert _builds(gate)[4:] == [(5, 0), (6, CONFIRM_SEED), (7, CONFIRM_SEED)]
    assert third.stdout.count("] confirm ") == 1  # repeat 0 of the best recipe
    third.ctrl_c()  # Ray Tune's own Ctrl-C handler must be gone by now
    assert third.wait() == 130, third.stderr
    assert "Traceback" not in third.stderr
    assert "--resume" in third.stderr.strip().splitlines()[-1]
    assert "best recipe:" in third.stdout  # the search's best is still written
    assert not [r for r in _runs(tmp_path) if r.info.status == "RUNNING"]
    trials = _trials(tmp_path)  # one run per trial: each victim's run is the one its retraining finished
    assert len(trials) == TRIALS and all(t.info.status == "FINISHED" for t in trials)
    assert {t.data.tags["autospeed.status"] for t in trials} == {"reached"}
    kept = _assert_kept(tmp_path, kept)
    assert len(kept) == TRIALS  # only the one trial left unfinished trained again (build 5)
    parent = _parent(tmp_path)
    assert parent.info.status == "FINISHED"  # every trial ended; only the confirmation was cut short
    assert sorted(r.info.status for r in _runs(tmp_path, "confirm")) == ["FINISHED", "KILLED"]
    assert "confirm_speedup_vs_baseline" not in parent.data.metrics

    # 4. The last resume confirms and ends: it trains the interrupted run again (build 8, its seed), and nothing
    # else: no trial, and not the best recipe's run that had finished.
    gate.open()
    fourth = autospeed(*_args(tmp_path, "--resume"), cwd=tmp_path, env=env)
    assert fourth.returncode == 0, fourth.stderr
    assert "confirmed best" in fourth.stdout
    assert _builds(gate)[7:] == [(8, CONFIRM_SEED)]
    assert sorted(r.info.status for r in _runs(tmp_path, "confirm")) == ["FINISHED", "FINISHED", "KILLED"]
    _assert_kept(tmp_path, kept)
    parent = _parent(tmp_path)
    assert parent.info.status == "FINISHED" and parent.data.metrics["confirm_repeats"] == REPEATS


CTRL_C_DURING_WRITES = """
import signal, sys
import sqlalchemy
from autospeed.track import writers
from autospeed.track.store import connect, experiment_id
from autospeed.recipe import Recipe
from autospeed.train.trainer import train
from autospeed.workloads import load_workload

client = connect(sys.argv[1])
exp = experiment_id(client, "writes")
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
        writers.finish_run(client, run_id, recipe, result)
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
        writers.mark_killed(client, run_id)  # what an interrupted confirmation does
print(f"{n} statements, {sent} Ctrl-C sent, {interrupted} interrupted")
"""


def test_ctrl_c_in_the_middle_of_a_tracking_write_leaves_no_run_running(tmp_path, new_store):
    """Ctrl-C inside an MLflow write used to leave the SQLite store locked: the interrupted
    run could not be marked KILLED and stayed RUNNING (seen as a flaky confirmation test).
    Ctrl-C lands after each SQL statement of finish_run in turn, its transaction open: every
    one must still interrupt (held, then delivered), and every run must end."""
    import re
    import subprocess
    import sys

    uri = new_store(tmp_path)
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
