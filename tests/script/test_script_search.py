"""`autospeed search --script SCRIPT --space SPACE -- ARGS` and `autospeed train --script SCRIPT --config
best.yaml -- ARGS` end to end (docs/design.md "User scripts"), run as a user runs them: the CLI in a subprocess,
on the tiny script of tests/script/conftest.py (flags in its docstring).

Each search costs a Python and a Ray start-up (about 25 s on 2 busy cores): a test runs one, and checks
everything a user would look at after it (exit code, output, the MLflow runs, the exported recipe). Bad input
that stops a search before Ray starts (the script's preflight, its path, its arguments) runs the CLI's main() in
this process (tests/conftest.py cli_in_process), less a Python start-up per case."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.reliability.conftest import (
    autospeed,
    cli_env,
    client_for,
    error_lines,
    search_runs,
    sigkill_with_state_whole,
    start_cli,
    wait_until,
    write_space,
)

# Three CLI runs with Ray (a search and its --resume) in the slowest test: above pytest's default ceiling
# on a busy 2-core machine is possible; this only guards against a hang.
pytestmark = pytest.mark.timeout(900)

__all__ = ["start_cli"]  # a fixture, imported to be used here

TRIALS = 2  # the baseline and one sampled trial: every test pays a few seconds of script start-up per trial


def _space(folder: Path, name: str, space: dict | None = None, trials: int = TRIALS, **extra) -> Path:
    """A small space for the tiny script: `trials` trials (the baseline first), a budget of seconds, no ASHA,
    no confirmation (repeats 0), CPU trials. Its baseline (lr 0.5) reaches 0.9 within a few epochs of the
    tiny script's data. The probe is off unless `extra` turns it on: each probe is a run of the script, seconds a
    test that checks something else would pay (test_a_script_search_probes_... turns it on)."""
    return write_space(folder, {
        "name": name, "target_accuracy": 0.9,
        "budget": {"trials": trials, "max_train_seconds": 10}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": 1, "repeats": 0},
        "resources": {"gpus_per_trial": 0},
        "baseline": {"batch_size": 32, "lr": 0.5}, "fixed": {"epochs": 20, "eval_every_epochs": 1},
        "space": space or {"lr": {"loguniform": [0.3, 1.0]}, "batch_size": {"choice": [32, 64]}},
        "probe": {"enabled": False}, **extra,
    }, name=f"{name}.yaml")


def _search(folder: Path, uri: str, space: Path, *extra: str) -> list[str]:
    """The CLI arguments of a search of `space` on the store `uri`, its Ray results under folder/store;
    `extra`: --script, --resume, `-- ARGS`..."""
    return ["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(folder / "store"), *extra]


@pytest.fixture
def in_folder(tmp_path, monkeypatch, cli_in_process):
    """in_folder(*args) -> `autospeed ARGS`'s CompletedProcess, main() run in this process from tmp_path with the
    CLI's environment (no MLFLOW_TRACKING_URI): for a search that stops before Ray starts."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return cli_in_process


def _observed_pids(observe: Path) -> set[int]:
    """The processes that wrote a line to the tiny script's --observe file (one line per optimizer step)."""
    if not observe.exists():
        return set()
    return {json.loads(line)["pid"] for line in observe.read_text().splitlines()}


# ---------------------------------------------------------------- stopped before any trial
def test_a_searched_knob_the_script_never_reads_stops_the_search_before_any_trial(tmp_path, tiny_script,
                                                                                  new_store, in_folder):
    """The script builds its own optimizer (--own-optimizer), so searching optimizer_impl would measure
    nothing: the search stops with exit 2 and one line on stderr naming the key and the helper that reads
    it; no trial ran, no run was created."""
    uri = new_store(tmp_path)
    space = _space(tmp_path, "unread", space={"batch_size": {"choice": [32, 64]},
                                              "optimizer_impl": {"choice": ["default", "foreach"]}})
    p = in_folder(*_search(tmp_path, uri, space, "--script", str(tiny_script), "--", "--own-optimizer"))
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines == error_lines(p.stderr), p.stderr
    assert "'space.optimizer_impl'" in lines[0] and "ctx.optimizer" in lines[0], lines[0]
    assert str(space) in lines[0]
    assert search_runs(uri, "unread") == ([], [])


def test_a_missing_script_arguments_it_rejects_and_arguments_without_a_script_exit_2(tmp_path, tiny_script,
                                                                                    new_store, write_recipe,
                                                                                    in_folder):
    """Bad input, each one line and exit 2, before any trial: a script path that does not exist (named);
    arguments the script itself rejects (the script fails before its first optimizer step: the line says so
    and gives the command that shows why); arguments after -- with no --script, to search or train."""
    uri = new_store(tmp_path)
    space = _space(tmp_path, "bad")

    missing = tmp_path / "no_such_train.py"
    p = in_folder(*_search(tmp_path, uri, space, "--script", str(missing)))
    assert p.returncode == 2, p.stderr
    assert len(error_lines(p.stderr)) == 1 and "Traceback" not in p.stderr, p.stderr
    assert f"no such file: {missing}" in error_lines(p.stderr)[0]

    p = in_folder(*_search(tmp_path, uri, space, "--script", str(tiny_script), "--", "--no-such-flag"))
    assert p.returncode == 2, p.stderr
    assert "unrecognized arguments: --no-such-flag" in p.stderr  # the script's own complaint, passed on
    [line] = error_lines(p.stderr)
    assert f"{tiny_script} failed before its first optimizer step" in line, line
    assert line.endswith(f"run it alone to see why: python {tiny_script} --no-such-flag"), line

    recipe = write_recipe({"workload": "script", "workload_options": {"script": str(tiny_script)},
                           "target_accuracy": 0.9, "max_train_seconds": 5})
    for args in (_search(tmp_path, uri, space, "--", "--samples", "64"),
                 ["train", "--config", str(recipe), "--no-track", "--", "--samples", "64"]):
        p = in_folder(*args)
        assert p.returncode == 2, (args, p.stderr)
        [line] = error_lines(p.stderr)
        assert "arguments after -- (--samples 64) are for a script" in line and "--script" in line, line
    assert search_runs(uri, "bad") == ([], [])


# ---------------------------------------------------------------- the probe through the script's loop
def test_a_script_search_probes_its_systems_knobs_through_its_own_loop_then_searches_the_narrowed_space(
        tmp_path, tiny_script, new_store):
    """The probe on, for a space with one systems knob (optimizer_impl default or foreach): each configuration is
    timed in 2 interleaved rounds by runs of the script itself, Ray tasks that start it in the folder the search
    started from (it opens data.txt by a relative path there, or fails). Each configuration is an MLflow child run
    of kind probe with its samples/s; the parent records what the probe fixed, and the sampled trial trains with
    it (the narrowed space), whichever value won on this machine."""
    uri = new_store(tmp_path)
    (tmp_path / "data.txt").write_text("the script's data")
    space = _space(tmp_path, "probed", space={"optimizer_impl": {"choice": ["default", "foreach"]},
                                              "lr": {"loguniform": [0.3, 1.0]}},
                   probe={"warmup_steps": 2, "steps": 5, "rounds": 2})
    p = autospeed(*_search(tmp_path, uri, space, "--script", tiny_script.name, "--", "--relative-file", "data.txt"),
                  cwd=tmp_path, env=cli_env())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "probe round 2: 2 configurations" in p.stdout and "probe: skipped" not in p.stdout, p.stdout[-3000:]
    fixed = re.search(r"^probe fixed: optimizer_impl=(default|foreach) \(", p.stdout, re.M)
    assert fixed, p.stdout[-3000:]
    [parent], trials = search_runs(uri, "probed")
    client = client_for(uri)
    probes = client.search_runs([parent.info.experiment_id], "tags.`autospeed.kind` = 'probe'")
    assert sorted(r.data.params["optimizer_impl"] for r in probes) == ["default", "foreach"]
    for r in probes:
        assert r.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert r.data.tags["autospeed.status"] == "ok" and r.data.metrics["samples_per_second"] > 0, r.data.tags
    assert json.loads(parent.data.tags["autospeed.probe_fixed"])["optimizer_impl"] == fixed[1]
    sampled = [t for t in trials if t.data.tags["autospeed.baseline"] == "false"]
    assert len(sampled) == TRIALS - 1 and {t.data.params["optimizer_impl"] for t in sampled} == {fixed[1]}


# ---------------------------------------------------------------- a script that crashes
def test_a_crashing_script_fails_its_trials_with_its_stderr_and_stops_the_search(tmp_path, tiny_script, new_store):
    """The script raises at its second optimizer step (after the preflight's first): each trial ends
    `failed`, its MLflow run FAILED with the error and an artifact stderr_tail.txt holding the script's
    traceback; after max_consecutive_errors (1) trial failing the search stops with exit 1 and says why,
    without the trial it had left and without a best recipe."""
    uri = new_store(tmp_path)
    space = _space(tmp_path, "crash", max_consecutive_errors=1)
    p = autospeed(*_search(tmp_path, uri, space, "--script", str(tiny_script), "--", "--crash-at-step", "2"),
                  cwd=tmp_path, env=cli_env())
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    [line] = error_lines(p.stderr)
    assert "search stopped: the last trial failed: " in line and "boom at step 2" in line, line
    assert "best recipe:" not in p.stdout and "Traceback" not in p.stdout

    parents, trials = search_runs(uri, "crash")
    assert len(parents) == 1 and parents[0].info.status == "FAILED"
    assert len(trials) == 1 < TRIALS  # stopped after one: the other never ran
    client = client_for(uri)
    for t in trials:
        assert t.info.status == "FAILED" and t.data.tags["autospeed.status"] == "failed"
        assert "boom at step 2" in t.data.tags["autospeed.error"]
        tail = Path(client.download_artifacts(t.info.run_id, "stderr_tail.txt", str(tmp_path))).read_text()
        assert "RuntimeError: boom at step 2" in tail and str(tiny_script) in tail  # the script's traceback


# ---------------------------------------------------------------- SIGKILL, then --resume


def _script_processes(script: Path) -> dict[int, dict[str, str]]:
    """The live processes running `script` (pid -> environment): the search's preflight (its environment
    has AUTOSPEED_PREFLIGHT) and its trials."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str(script).encode() not in (entry / "cmdline").read_bytes().split(b"\0"):  # a zombie's is empty
                continue
            pairs = (entry / "environ").read_bytes().decode(errors="replace").split("\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):  # gone meanwhile
            continue
        found[int(entry.name)] = dict(kv.split("=", 1) for kv in pairs if "=" in kv)
    return found


def test_a_script_search_killed_mid_trial_resumes_each_trial_once_then_exports_and_trains(
        tmp_path, tiny_script, new_store, start_cli, in_folder):
    """A user's journey with a script search of 2 trials (the script given by a relative path, its arguments
    after --). Started with --resume, as a preemption wrapper always passes it: there is no earlier search, so
    it starts, saying so. SIGKILLed whole (driver and Ray, a batch scheduler killing the job) while its first
    trial's script is training (held before an optimizer step by --gate): that script dies with it, and the
    same command resumes to the end: every trial finished once, one MLflow child run per trial, a reached one
    with its tta_seconds. `autospeed export` then writes a recipe that names the script by its absolute path
    and its arguments, and `autospeed train` of it, alone or with --script, runs the script with them to the
    target. The script opens its data by a path relative to the folder the search started from: the preflight,
    the trials (whose processes Ray moves into trial folders) and `autospeed train` all run it there."""
    uri = new_store(tmp_path)
    space = _space(tmp_path, "killed", trials=TRIALS)
    gate = tmp_path / "gate"
    gate.mkdir()
    observe = tmp_path / "observe.jsonl"  # each script process appends a line per optimizer step
    args = _search(tmp_path, uri, space, "--script", tiny_script.name, "--resume")
    (tmp_path / "data.txt").write_text("the script's data")  # opened by a relative path, in every run of it
    script_args = ["--", "--gate", str(gate), "--observe", str(observe), "--relative-file", "data.txt"]

    search = start_cli(*args, *script_args, cwd=tmp_path, env=cli_env())

    def training():
        assert search.proc.poll() is None, search.stdout + search.stderr
        scripts = [pid for pid, env in _script_processes(tiny_script).items() if not env.get("AUTOSPEED_PREFLIGHT")]
        running = [t for t in search_runs(uri, "killed")[1] if t.info.status == "RUNNING"]
        return scripts if scripts and running else None

    trial_pids = wait_until(training, every=0.25, what="a trial's script at its gate and its MLflow run")
    root = tmp_path / "store" / "killed"
    exp_dir = wait_until(lambda: root.is_dir() and next((d for d in root.iterdir() if d.is_dir() and any(
        f.name.startswith("experiment_state") for f in d.iterdir())), None), what="Ray Tune's saved state")
    sigkill_with_state_whole(search, exp_dir, whole_group=True)
    search.wait()
    # the trial's script had a session of its own (out of the killed group): it dies with its trial's process
    wait_until(lambda: not _script_processes(tiny_script), timeout=60, every=0.1,
               what=f"no script process left of the killed search (were {trial_pids})")
    search.reap()  # Ray's processes of the dead search, if any were left

    (gate / "go").touch()
    # the same command, from another folder (the script named by its absolute path): the script still starts in the
    # folder the search started from, its preflight and its trials alike, where it finds its relative data.txt
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = autospeed(*_search(tmp_path, uri, space, "--script", str(tiny_script), "--resume"), *script_args,
                        cwd=elsewhere, env=cli_env())
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert not error_lines(resumed.stderr), resumed.stderr
    first = search.stdout
    assert "--resume: no earlier search named 'killed'" in first and "starting it" in first, first[-2000:]
    assert f"preflight: running {tiny_script}" in first and "probe fixed" not in first  # off here (_space)
    # the resumed search counts the killed trial once: as it trains again, not also as done
    counts = [int(m) for m in re.findall(r"^\[(\d+)/2\]", resumed.stdout, re.M)]
    assert counts and max(counts) == TRIALS, resumed.stdout
    parents, trials = search_runs(uri, "killed")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert all(t.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for t in trials)
    assert not [t for t in trials if t.info.status == "RUNNING"]
    done = [t for t in trials if t.data.tags.get("autospeed.status") != "killed"]
    assert len(done) == TRIALS and len({t.data.tags["autospeed.trial_id"] for t in done}) == TRIALS
    assert all(t.info.status == "FINISHED" for t in done), [t.data.tags["autospeed.status"] for t in done]
    reached = [t for t in done if t.data.tags["autospeed.status"] == "reached"]
    assert reached and all(t.data.metrics["tta_seconds"] > 0 for t in reached)
    assert len(_observed_pids(observe)) == TRIALS  # the arguments reached each trial's script
    # the script's own schedule and optimizer (its defaults name neither): the leaderboard says whose they are
    assert "schedule=script" in resumed.stdout and "optimizer=script" in resumed.stdout, resumed.stdout[-3000:]
    assert not _script_processes(tiny_script)

    exported = in_folder("export", "--name", "killed", "--out", "best.yaml", "--tracking-uri", uri)
    assert exported.returncode == 0, exported.stderr
    recipe = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert recipe["workload"] == "script"
    assert recipe["workload_options"] == {"script": str(tiny_script), "args": script_args[1:]}
    assert (recipe["schedule"], recipe["optimizer"], recipe["max_train_seconds"]) == ("script", "script", 10)
    assert {"schedule", "optimizer", "epochs", "eval_every_epochs"} <= set(recipe["measured"]["script_own"])
    # the recipe alone, then with the script named again (its arguments still the recipe's)
    for extra in ([], ["--script", tiny_script.name]):
        before = _observed_pids(observe)
        trained = autospeed("train", "--config", "best.yaml", "--no-track", *extra, cwd=tmp_path, env=cli_env(),
                            timeout=120)
        assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-2000:]
        assert "status reached" in trained.stdout, trained.stdout[-2000:]
        assert not error_lines(trained.stderr), trained.stderr
        assert len(_observed_pids(observe) - before) == 1  # one new script process, with the exported args
