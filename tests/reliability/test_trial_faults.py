"""Trial faults (OOM, NaN, compile failure, the same error N times), two searches of
one name in one store, export and resume-after-change, against one store built once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from .conftest import autospeed, cli_env, client_for, error_lines, search_runs, write_plugin, write_space

# The store fixture runs two searches and an export inside the first test's time; on a busy
# 2-core machine that takes far longer than pytest's default 600 s ceiling allows (a hang guard).
pytestmark = pytest.mark.timeout(1800)

NAME = "faults"
OOM_ABOVE, NAN_BATCH = 64, 9
# Every trial of search B ends by itself (target, OOM, NaN, compile error) long before this: a
# budget that a busy machine's slow steps could exhaust would turn `reached` into `not_reached`.
BUDGET = 120.0


def _spec(marker, **over) -> dict:
    spec = {
        "name": NAME, "workload": "faulty_plugin:faulty",
        "workload_options": {"oom_above": OOM_ABOVE, "nan_batch": NAN_BATCH, "marker": str(marker)},
        "target_accuracy": 0.9, "budget": {"trials": 7, "max_train_seconds": BUDGET},
        # the sampler's sequence: ok ok compile oom nan compile
        "asha": {"enabled": False}, "sampler": {"kind": "random", "seed": 18},
        "confirm": {"top_k": 1, "repeats": 0},
        # the faults are the trials' to meet: a probe would narrow compile to none and log its own OOMs
        "probe": {"enabled": False},
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 20, "eval_every_epochs": 1, "batch_size": 8},
        # compile=default fails (no C++ compiler, below); with compile=none the batch size picks the fault.
        "space": {"compile": {"choice": ["none", "default"]},
                  "batch_size": {"choice": [32, NAN_BATCH, 128], "when": {"compile": ["none"]}}},
    }
    spec.update(over)
    return spec


@pytest.fixture(scope="module")
def store(tmp_path_factory, new_store, cli_in_process):
    """Search A (every trial OOMs) then search B (a mix of faults), both named `faults`."""
    d = tmp_path_factory.mktemp("faults")
    write_plugin(d)
    # A machine without a working C++ compiler: torch.compile (inductor) fails for real.
    env = cli_env({"CXX": str(d / "no-such-c++")}, pythonpath=d)
    uri, storage = new_store(d), str(d / "store")
    common = ["--tracking-uri", uri, "--storage-path", storage]
    oom_marker, mix_marker = d / "oom-a.log", d / "oom-b.log"
    all_oom = _spec(oom_marker, max_consecutive_errors=2, baseline={"batch_size": 128},
                    budget={"trials": 6, "max_train_seconds": 2},
                    space={"batch_size": {"choice": [96, 256]}})  # OOM messages differ from the baseline's
    a_space = write_space(d, all_oom, "all_oom.yaml")
    b_space = write_space(d, _spec(mix_marker), "mix.yaml")
    a = autospeed("search", "--space", str(a_space), *common, cwd=d, env=env)
    export_a = cli_in_process("export", "--name", NAME, "--out", str(d / "best.yaml"), "--tracking-uri", uri)
    b = autospeed("search", "--space", str(b_space), *common, cwd=d, env=env)
    return {"dir": d, "env": env, "uri": uri, "storage": storage, "a": a, "b": b, "export_a": export_a,
            "a_space": a_space, "b_space": b_space, "mix_marker": mix_marker, "oom_marker": oom_marker}


def _by_parent(store):
    parents, trials = search_runs(store["uri"], NAME)
    assert len(parents) == 2, [p.info.run_name for p in parents]
    a, b = parents
    kids = {p.info.run_id: [t for t in trials if t.data.tags["mlflow.parentRunId"] == p.info.run_id]
            for p in parents}
    return a, b, kids[a.info.run_id], kids[b.info.run_id]


def _expected(run) -> str:
    p = run.data.params
    if p["compile"] != "none":
        return "failed"
    bs = int(p["batch_size"])
    return "oom" if bs > OOM_ABOVE else "diverged" if bs == NAN_BATCH else "reached"


def test_each_fault_gets_its_status_and_the_search_goes_on(store):
    b = store["b"]
    assert b.returncode == 0, b.stderr
    _, parent, _, trials = _by_parent(store)
    assert parent.info.status == "FINISHED"
    assert len(trials) == 7 and len({t.data.tags["autospeed.trial_id"] for t in trials}) == 7
    statuses = {}
    for t in trials:
        status = t.data.tags["autospeed.status"]
        assert status == _expected(t), (t.data.params, t.data.tags.get("autospeed.error"))
        statuses.setdefault(status, []).append(t)
    assert {"oom", "diverged", "failed", "reached"} <= set(statuses), set(statuses)
    budget = BUDGET
    for status in ("oom", "diverged", "failed"):
        for t in statuses[status]:
            assert t.info.status == "FAILED"
            assert t.data.metrics["objective"] == pytest.approx(3 * budget)  # infeasible, reported not raised
            assert "tta_seconds" not in t.data.metrics
    assert "OutOfMemoryError" in statuses["oom"][0].data.tags["autospeed.error"]
    assert "nan" in statuses["diverged"][0].data.tags["autospeed.error"].lower()
    compile_error = statuses["failed"][0].data.tags["autospeed.error"]
    assert "C++ compiler" in compile_error and "\n" not in compile_error  # the error's first line
    for t in statuses["reached"]:
        assert t.info.status == "FINISHED" and t.data.metrics["objective"] < budget


def test_oom_is_trained_once_per_trial(store):
    """A deterministic OOM repeats, so an OOM trial ends at its first OOM and is never run again:
    the plugin writes one marker line per OOM it raises, so a retry of the trial (Ray restarting a
    trial that raised, a trainer retrying the step) would add lines. A repeated recipe takes its
    first trial's result without training (autospeed.duplicate_of): it raises nothing."""
    _, _, _, trials = _by_parent(store)
    trained = [t for t in trials if t.data.tags["autospeed.status"] == "oom"
               and "autospeed.duplicate_of" not in t.data.tags]
    assert trained
    raised = sorted(int(line.split()[1]) for line in store["mix_marker"].read_text().splitlines())
    assert raised == sorted(int(t.data.params["batch_size"]) for t in trained)


def test_same_error_in_a_row_stops_the_search(store):
    a = store["a"]
    assert a.returncode == 1, a.stderr
    lines = error_lines(a.stderr)
    assert len(lines) == 1 and "Traceback" not in a.stderr, a.stderr
    assert "last 2 trials" in lines[0] and "OutOfMemoryError: CUDA out of memory" in lines[0]
    parent, _, trials, _ = _by_parent(store)
    assert parent.info.status == "FAILED"
    assert "OutOfMemoryError" in parent.data.tags["autospeed.error"]
    assert 2 <= len(trials) < 6  # stopped early, not all 6 requested
    assert all(t.info.status in ("FAILED", "KILLED") for t in trials)


def test_two_searches_with_one_name_keep_apart(store):
    a, b, a_trials, b_trials = _by_parent(store)
    assert a.data.tags["autospeed.search_id"] != b.data.tags["autospeed.search_id"]
    for parent, trials in ((a, a_trials), (b, b_trials)):
        assert {t.data.tags["autospeed.search_id"] for t in trials} == {parent.data.tags["autospeed.search_id"]}
        board = client_for(store["uri"]).download_artifacts(parent.info.run_id, "leaderboard.csv",
                                                             str(store["dir"]))
        ids = {line.split(",")[1] for line in open(board).read().splitlines()[1:]}
        assert ids == {t.data.tags["autospeed.trial_id"] for t in trials}


def test_export_with_no_reached_trial_exits_1(store):
    e = store["export_a"]
    assert e.returncode == 1
    lines = error_lines(e.stderr)
    assert len(lines) == 1 and "no trial that reached" in lines[0], e.stderr
    assert not (store["dir"] / "best.yaml").exists()


def test_export_picks_a_reached_trial(store, cli_in_process):
    out = store["dir"] / "exported.yaml"
    e = cli_in_process("export", "--name", NAME, "--out", str(out), "--tracking-uri", store["uri"])
    assert e.returncode == 0, e.stderr
    measured = yaml.safe_load(out.read_text())["measured"]
    _, _, _, trials = _by_parent(store)
    status = {t.data.tags["autospeed.trial_id"]: t.data.tags["autospeed.status"] for t in trials}
    assert status[measured["trial_id"]] == "reached"
    fastest = min(t.data.metrics["tta_seconds"] for t in trials if "tta_seconds" in t.data.metrics)
    assert measured["tta_seconds"] == pytest.approx(fastest)


KILL_MID_WRITE = """
import os, sys, time
import autospeed.yamlio as y
def stuck(fd):  # the temp file holds the new text; the rename has not happened yet
    open(sys.argv[1], "w").close()
    time.sleep(600)
y.os.fsync = stuck
from autospeed.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_export_killed_mid_write_keeps_the_previous_file(store):
    out = store["dir"] / "kept.yaml"
    previous = "# the previous best recipe\nlr: 0.1\n"
    out.write_text(previous)
    ready = store["dir"] / "writing"
    proc = subprocess.Popen([sys.executable, "-c", KILL_MID_WRITE, str(ready), "export", "--name", NAME,
                             "--out", str(out), "--tracking-uri", store["uri"]], cwd=store["dir"], env=store["env"])
    deadline = time.monotonic() + 120
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ready.exists(), "export never reached the write"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert out.read_text() == previous


def test_resume_after_the_space_changed_exits_2_and_runs_nothing(store, monkeypatch, cli_in_process):
    monkeypatch.syspath_prepend(str(store["dir"]))  # the space's plugin workload imports, as on PYTHONPATH
    space = store["b_space"]
    spec = yaml.safe_load(space.read_text())
    spec["target_accuracy"] = 0.8
    spec["space"]["compile"]["choice"] = ["none"]
    changed = write_space(store["dir"], spec, "mix_changed.yaml")
    before = search_runs(store["uri"], NAME)
    p = cli_in_process("search", "--space", str(changed), "--tracking-uri", store["uri"], "--storage-path",
                       store["storage"], "--resume")
    assert p.returncode == 2
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "target_accuracy" in lines[0] and "space.compile.choice" in lines[0]
    after = search_runs(store["uri"], NAME)
    assert [(r.info.run_id, r.info.status) for r in after[0] + after[1]] == \
        [(r.info.run_id, r.info.status) for r in before[0] + before[1]]
