"""The search pipeline (search/run.py) through the CLI, in a temporary folder, against real Ray,
Optuna and MLflow."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SMOKE = Path(__file__).resolve().parents[2] / "search_spaces" / "smoke.yaml"


def autospeed(*args, cwd, timeout=300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autospeed", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, **kw)


def write_space(folder: Path, **overrides) -> Path:
    space = yaml.safe_load(SMOKE.read_text())
    for key, value in overrides.items():
        space[key] = value
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def client_for(folder: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")


def runs_of(folder: Path, name: str):
    client = client_for(folder)
    exp = client.get_experiment_by_name(name)
    return client.search_runs([exp.experiment_id], max_results=1000)


def test_search_logs_parent_and_one_child_per_trial(finished_search):
    runs = finished_search.runs()
    parents = [r for r in runs if r.data.tags.get("autospeed.kind") == "search"]
    trials = [r for r in runs if r.data.tags.get("autospeed.kind") == "trial"]
    assert len(parents) == 1
    parent = parents[0]
    search_id = parent.data.tags["autospeed.search_id"]
    assert parent.info.status == "FINISHED"
    assert (Path(parent.data.tags["autospeed.experiment_dir"]) / "optuna.db").exists()  # report finds the study
    assert len(trials) == 6
    assert len({r.data.tags["autospeed.trial_id"] for r in trials}) == 6
    for run in trials:
        tags, metrics = run.data.tags, run.data.metrics
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["autospeed.search_id"] == search_id
        assert tags["autospeed.status"] in ("reached", "not_reached", "stopped_early")
        assert tags["autospeed.baseline"] in ("true", "false")
        for name in ("best_val_accuracy", "objective", "val_accuracy", "train_seconds", "samples_per_second",
                     "train_loss", "wall_seconds", "compile_seconds", "peak_memory_mb"):  # ASHA-stopped ones too
            assert name in metrics, name
        assert ("tta_seconds" in metrics) == (tags["autospeed.status"] == "reached")
        # where it ran, ASHA-stopped trials too: host name and Ray node id; and the device
        host, _, node_id = tags["autospeed.env.node"].partition("/")
        assert host == socket.gethostname() and len(node_id) == 56, tags["autospeed.env.node"]
        assert tags["autospeed.env.device"] == "cpu" and tags["autospeed.env.device_name"]
        assert {"batch_size", "lr", "schedule", "precision", "compile", "target_accuracy"} <= set(run.data.params)
    # The baseline is trial 0 with the file's baseline recipe.
    baseline = [r for r in trials if r.data.tags["autospeed.baseline"] == "true"]
    assert len(baseline) == 1
    assert baseline[0].data.params["batch_size"] == "32" and baseline[0].data.params["lr"] == "0.05"
    assert min(trials, key=lambda r: r.info.start_time) is baseline[0]
    # Parent metrics and the leaderboard the user sees.
    assert parent.data.metrics["trials_total"] == 6
    assert "best_tta_seconds" in parent.data.metrics
    stdout = finished_search.stdout
    assert "baseline" in stdout and "best recipe:" in stdout and "mlflow ui" in stdout


def test_asha_stops_a_slow_learner(finished_search):
    statuses = [r.data.tags["autospeed.status"] for r in finished_search.runs("trial")]
    assert "stopped_early" in statuses


def test_the_search_says_where_the_best_lr_moved_over_ashas_rungs_as_a_prediction(finished_search):
    """search/rung_trend.py: each rung's leader among the trials that trained that long, recorded on the parent and
    printed after confirmation, extrapolated to the confirmed winner's median TTA and labelled a prediction."""
    (parent,) = finished_search.runs("search")
    found = json.loads(parent.data.tags["autospeed.horizon_trend"])
    lr = {r.data.tags["autospeed.trial_id"]: float(r.data.params["lr"]) for r in finished_search.runs("trial")}
    assert len(found["rungs"]) >= 2 and all(r["trials"] >= 2 for r in found["rungs"])
    assert [r["lr"] for r in found["rungs"]] == [lr[r["leader"]] for r in found["rungs"]]
    assert found["job_seconds"] == parent.data.metrics["confirm_tta_seconds_median"]
    assert "\nhorizon trend (each ASHA rung's leader" in finished_search.stdout
    if found["knobs"]["lr"]["slope"]:  # the leaders' lr moved: extrapolated, and said to be a prediction
        assert found["knobs"]["lr"]["at_job"] > 0
        assert "(the confirmed winner's median TTA), the trend says ~" in finished_search.stdout
        assert "not measured)" in finished_search.stdout
    else:  # one trial led every rung: nothing to extrapolate
        assert found["knobs"]["lr"]["at_job"] is None and " at every rung (no trend)" in finished_search.stdout


def test_logged_objectives_put_every_reached_trial_before_the_rest(finished_search):
    trials = finished_search.runs("trial")
    done = [r.data.metrics["objective"] for r in trials if r.data.tags["autospeed.status"] == "reached"]
    rest = [r.data.metrics["objective"] for r in trials if r.data.tags["autospeed.status"] != "reached"]
    assert done and rest  # the shared space has both (ASHA stops the slow learners)
    assert max(done) < min(rest)


def test_optuna_study_is_readable(finished_search):
    import optuna

    (db,) = (finished_search.folder / "runs" / finished_search.name).glob("*/optuna.db")
    study = optuna.load_study(study_name=finished_search.name, storage=f"sqlite:///{db}")
    finished = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(study.trials) == 6 and len(finished) == 6
    assert study.trials[0].user_attrs.get("baseline") is True
    assert all("lr" in t.params for t in study.trials[1:])
    assert study.best_value > 0


def test_export_then_train_round_trips(finished_search, tmp_path):
    out = tmp_path / "best.yaml"
    proc = finished_search.main("export", "--name", finished_search.name, "--tracking-uri", finished_search.uri,
                               "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    best = yaml.safe_load(out.read_text())
    m = best["measured"]
    assert m["search_name"] == finished_search.name and m["tta_seconds"] > 0
    assert m["environment"]["device"] == "cpu"
    trial = next(r for r in finished_search.runs("trial") if r.data.tags.get("autospeed.trial_id") == m["trial_id"])
    assert trial.data.tags["autospeed.status"] == "reached"
    assert float(trial.data.params["lr"]) == pytest.approx(best["lr"])
    proc = finished_search.cli("train", "--config", str(out), "--no-track", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] in ("reached", "not_reached")
    assert result["applied"]["device"] == "cpu"


@pytest.fixture(scope="module")
def extended(tmp_path_factory, new_store, cli_in_process):
    """A six-trial search that reaches nothing (target 1.0, 0.3 s of train clock per trial) over a space
    of two recipes, so the random sampler proposes some recipe twice; its export; then `--resume
    --trials 4` (refused) and `--resume --trials 10` (extended). What each step printed, and the trial
    runs as they stood after the first search, are kept for the tests. The export and the refused resume
    never train: the CLI's main() runs them in this process, less a Python start-up each."""
    folder = tmp_path_factory.mktemp("extend")
    space = write_space(folder, name="extend", target_accuracy=1.0, budget={"trials": 6, "max_train_seconds": 0.3},
                        asha={"grace_seconds": 0.1, "reduction_factor": 2}, sampler={"kind": "random", "seed": 0},
                        probe={"enabled": False}, space={"batch_size": {"choice": [32, 64]}},
                        fixed={"epochs": 30, "eval_every_epochs": 1})
    uri = new_store(folder)
    args = ["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(folder / "runs")]
    steps = {"first": autospeed(*args, cwd=folder)}
    assert steps["first"].returncode == 0, steps["first"].stderr
    client = client_for(folder)

    def fingerprint(run):  # a trial trained again would end later and log its evaluations again
        return run.info.end_time, len(client.get_metric_history(run.info.run_id, "val_accuracy"))

    before = {r.info.run_id: fingerprint(r) for r in runs_of(folder, "extend")
              if r.data.tags["autospeed.kind"] == "trial"}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        steps["export"] = cli_in_process("export", "--name", "extend", "--tracking-uri", uri, "--out",
                                         str(folder / "best.yaml"))
        steps["shrink"] = cli_in_process(*args, "--resume", "--trials", "4")
    steps["second"] = autospeed(*args, "--resume", "--trials", "10", cwd=folder)
    return {"folder": folder, "client": client, "before": before, "fingerprint": fingerprint, **steps}


def test_a_search_that_reaches_nothing_says_so_and_its_export_exits_1(extended):
    assert "no trial reached the target" in extended["first"].stdout
    export = extended["export"]
    assert export.returncode == 1
    assert "no trial that reached" in export.stderr
    assert not (extended["folder"] / "best.yaml").exists()


def test_a_repeated_recipe_takes_the_first_result_without_training_again(extended):
    # Two recipes and ten trials: the sampler proposed some recipe twice.
    folder, client = extended["folder"], extended["client"]
    trials = [r for r in runs_of(folder, "extend") if r.data.tags["autospeed.kind"] == "trial"]
    assert len(trials) == 10
    by_id = {r.data.tags["autospeed.trial_id"]: r for r in trials}
    repeats = [r for r in trials if "autospeed.duplicate_of" in r.data.tags]
    assert len(repeats) >= 7  # baseline (16) + at most one first run each of 32 and 64
    for r in repeats:
        first = by_id[r.data.tags["autospeed.duplicate_of"]]
        assert "autospeed.duplicate_of" not in first.data.tags
        assert r.data.params["batch_size"] == first.data.params["batch_size"]
        assert r.data.tags["autospeed.status"] == first.data.tags["autospeed.status"]
        assert r.data.metrics["objective"] == first.data.metrics["objective"]
        assert client.get_metric_history(r.info.run_id, "val_accuracy") == []  # not trained again
    parent = next(r for r in runs_of(folder, "extend") if r.data.tags["autospeed.kind"] == "search")
    assert parent.data.metrics["trials_duplicate"] == len(repeats)
    assert parent.data.metrics["trials_total"] == 10


def test_resume_with_more_trials_extends_a_finished_search(extended):
    """`--resume --trials N` above the search's count: the same parent run, Optuna study and ASHA go
    on to N trials; the finished trials are not trained again; a smaller N is refused."""
    import optuna

    folder, before, fingerprint = extended["folder"], extended["before"], extended["fingerprint"]
    assert len(before) == 6
    shrink = extended["shrink"]
    assert shrink.returncode == 2 and "never shrinks" in shrink.stderr and "Traceback" not in shrink.stderr

    second = extended["second"]
    assert second.returncode == 0, second.stderr
    assert "10 trials" in second.stdout
    trials = [r for r in runs_of(folder, "extend") if r.data.tags["autospeed.kind"] == "trial"]
    assert len(trials) == 10 and len({r.data.tags["autospeed.trial_id"] for r in trials}) == 10
    assert all(r.info.status in ("FINISHED", "FAILED") for r in trials)
    assert {r.info.run_id: fingerprint(r) for r in trials if r.info.run_id in before} == before
    names = [r.info.run_name for r in trials]
    assert len(set(names)) == 10, names  # the new trials' runs are named on from the old ones
    parents = [r for r in runs_of(folder, "extend") if r.data.tags["autospeed.kind"] == "search"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["autospeed.trials"] == "10" and parents[0].data.metrics["trials_total"] == 10
    (db,) = (folder / "runs" / "extend").glob("*/optuna.db")
    study = optuna.load_study(study_name="extend", storage=f"sqlite:///{db}")
    assert [t.number for t in study.trials] == list(range(10))  # one study: the new trials follow the old
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


def test_validate_reports_errors(tmp_path, cli_in_process):
    """`autospeed validate`, which never trains: its main() in this process (the command as a process, and its
    exit code 2 for a missing file, are tests/test_cli.py's)."""
    bad = tmp_path / "bad.yaml"
    space = yaml.safe_load(SMOKE.read_text())
    space["space"]["lr"] = {"loguniform": [0.5, 0.01]}
    bad.write_text(yaml.safe_dump(space))
    proc = cli_in_process("validate", "--space", str(bad))
    assert proc.returncode == 2
    assert str(bad) in proc.stderr and "space.lr" in proc.stderr and "low < high" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    ok = cli_in_process("validate", "--space", str(SMOKE))
    assert ok.returncode == 0 and "ok" in ok.stdout


def test_a_loss_target_search_ranks_stops_confirms_exports_and_reports_in_the_loss(tmp_path, new_store):
    """target: val_loss <= 0.2 (mode min) end to end: ranking, MLflow, confirmation, best.yaml, report."""
    from autospeed.show.report import collect

    space = yaml.safe_load(SMOKE.read_text())
    del space["target_accuracy"]
    space.update(name="loss-target", target={"metric": "val_loss", "mode": "min", "value": 0.2},
                 # ASHA off: which trials it stops depends on the machine's speed at its rungs, and a loaded
                 # machine once had it stop every sampled trial, leaving nothing to confirm. ASHA on a loss
                 # target is test_tuner's test_asha_on_a_loss_target_stops_the_trial_with_the_higher_loss.
                 budget={"trials": 4, "max_train_seconds": 120}, asha={"enabled": False},
                 confirm={"top_k": 1, "repeats": 1}, fixed={"epochs": 20, "eval_every_epochs": 1},
                 probe={"enabled": False},  # nothing maths-neutral to decide; the probe is test_probe's
                 space={"lr": {"loguniform": [0.02, 0.3]}, "batch_size": {"choice": [32, 64]}})
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    uri = new_store(tmp_path)
    proc = autospeed("search", "--space", str(path), "--tracking-uri", uri, "--storage-path", str(tmp_path / "runs"),
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "target val_loss <= 0.2" in proc.stdout and "best val_loss" in proc.stdout  # header, leaderboard

    client = client_for(tmp_path)
    runs = runs_of(tmp_path, "loss-target")
    trials = [r for r in runs if r.data.tags["autospeed.kind"] == "trial"]
    assert len(trials) == 4
    for run in trials:
        m, status = run.data.metrics, run.data.tags["autospeed.status"]
        history = client.get_metric_history(run.info.run_id, "val_loss")
        assert history and client.get_metric_history(run.info.run_id, "val_accuracy"), "every metric, per evaluation"
        assert m["best_value"] == m["best_val_loss"] == pytest.approx(min(h.value for h in history))
        assert (m["best_value"] <= 0.2) == (status == "reached") == ("tta_seconds" in m)
    assert any(r.data.tags["autospeed.status"] == "reached" for r in trials)
    confirms = [r for r in runs if r.data.tags["autospeed.kind"] == "confirm"]
    # repeats 1: the best recipe and the baseline once each, in fresh processes: a speed-up, no interval
    assert len(confirms) == 2 and all("best_val_loss" in r.data.metrics for r in confirms)
    assert sorted(r.data.tags["autospeed.baseline"] for r in confirms) == ["false", "true"]
    assert "too few repeats for an interval" in proc.stdout

    best = yaml.safe_load(next((tmp_path / "runs" / "loss-target").glob("*/best.yaml")).read_text())
    assert best["target"] == {"metric": "val_loss", "mode": "min", "value": 0.2} and "target_accuracy" not in best
    assert best["measured"]["repeats"] == 1 and "speedup_ci_low" not in best["measured"]  # no interval from 1 run

    data = collect(client, "loss-target")
    assert (data.target_metric, data.target_mode, data.target) == ("val_loss", "min", 0.2)
    row = next(r for r in data.rows if r.reached)
    assert data.curves[row.run_id].values == [h.value for h in client.get_metric_history(row.run_id, "val_loss")]
