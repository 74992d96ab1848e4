"""A search with the probe on, interrupted right after its probe stage and resumed: the probe's decision
is kept (not probed again) and every trial is kept once.

The gated workload (conftest.GATED_PLUGIN) gates only the baseline's model builds here (its recipe seeds
1; probes and sampled trials seed 0): the probe runs freely, then the baseline trial, the first trial,
is held in the middle of training until the test opens its gate. The interrupt lands there, however
fast or slow the machine: after the probe decided and before any trial ended."""

from __future__ import annotations

import pytest

from .conftest import Gate, autospeed, cli_env, client_for, error_lines, search_runs, wait_until, write_space

pytestmark = pytest.mark.timeout(900)  # two CLI runs, each starting Ray: a hang guard on a busy 2-core machine

NAME = "probed"
TRIALS = 2  # the baseline, then one sampled trial


def _args(d, *extra):
    return ["search", "--space", str(d / "space.yaml"), "--tracking-uri", f"sqlite:///{d}/mlflow.db",
            "--storage-path", str(d / "store"), *extra]


def _probe_runs(d) -> list:
    c = client_for(f"sqlite:///{d}/mlflow.db")
    runs = c.search_runs([c.get_experiment_by_name(NAME).experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get("autospeed.kind") == "probe"]


def test_ctrl_c_right_after_the_probe_then_resume_keeps_its_decision_and_every_trial_once(
        tmp_path, start_cli, new_store):
    new_store(tmp_path)
    gate = Gate(tmp_path)
    write_space(tmp_path, {
        "name": NAME, **gate.workload(gate_from_seed=1), "target_accuracy": 0.9,
        "budget": {"trials": TRIALS, "max_train_seconds": 600}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": 1, "repeats": 0},
        # 2 systems configurations x 2 optimizers x 1 batch size x 2 rounds
        "probe": {"enabled": True, "warmup_steps": 0, "steps": 2, "rounds": 2},
        "baseline": {"batch_size": 32, "lr": 0.05, "seed": 1}, "fixed": {"epochs": 1000, "eval_every_epochs": 1},
        "space": {"optimizer": {"choice": ["sgd", "adamw"]}, "lr": {"loguniform": [0.01, 0.05]},
                  "optimizer_impl": {"choice": ["default", "foreach"]}},
    })
    env = cli_env(pythonpath=gate.plugin_dir)
    uri = f"sqlite:///{tmp_path}/mlflow.db"

    # 1. The probe decides; the baseline trial is held at its gate; Ctrl-C.
    first = start_cli(*_args(tmp_path), cwd=tmp_path, env=env)
    wait_until(lambda: gate.waiting() or first.proc.poll() is not None, every=0.1, what="the baseline trial held")
    assert first.proc.poll() is None, first.stdout + first.stderr
    builds = gate.builds()  # the probes' (and their worker's warm-up) and the held baseline's
    first.ctrl_c()
    assert first.wait() == 130, first.stderr
    assert "Traceback" not in first.stderr and "--resume" in first.stderr.strip().splitlines()[-1]
    decided = next(line for line in first.stdout.splitlines() if line.startswith("probe fixed: optimizer_impl="))
    (parent,), trials = search_runs(uri, NAME)
    assert parent.info.status == "KILLED" and not [t for t in trials if t.info.status == "FINISHED"]
    fixed, margin = parent.data.tags["autospeed.probe_fixed"], parent.data.tags["autospeed.probe_margin"]
    assert margin in decided and "noise" in margin
    probes = {r.info.run_id for r in _probe_runs(tmp_path)}
    assert len(probes) == 2 * 2  # configurations x maths (optimizers), at the one batch size
    assert {(r.data.params["optimizer_impl"], r.data.params["optimizer"]) for r in _probe_runs(tmp_path)} == {
        (i, o) for i in ("default", "foreach") for o in ("sgd", "adamw")}

    # 2. --resume: no probe again; the trials search the space the probe narrowed; each trial once.
    gate.open()
    resumed = autospeed(*_args(tmp_path, "--resume"), cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert not error_lines(resumed.stderr)
    assert "probe:" not in resumed.stdout and "probe fixed" not in resumed.stdout
    assert gate.builds() == builds + TRIALS  # the baseline trained again and the sampled trial: no probe build
    (parent,), trials = search_runs(uri, NAME)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["autospeed.probe_fixed"] == fixed and parent.data.tags["autospeed.probe_margin"] == margin
    assert {r.info.run_id for r in _probe_runs(tmp_path)} == probes
    done = [t for t in trials if t.info.status == "FINISHED"]
    assert len(done) == TRIALS and len({t.data.tags["autospeed.trial_id"] for t in done}) == TRIALS
    assert not [t for t in trials if t.info.status == "RUNNING"]
    sampled = [t for t in done if t.data.tags["autospeed.baseline"] == "false"]
    assert [t.data.params["optimizer_impl"] for t in sampled] == [decided.split("=", 1)[1].split(" ")[0]]
