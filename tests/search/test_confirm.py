"""Confirmation runs end to end: the test run's finished search (tests/conftest.py), its MLflow
confirmation child runs, the exported `measured` section, and the environment warning of
`autospeed train` (docs/design.md "Confirmation runs", "Exported recipe")."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

import pytest
import yaml

from autospeed.track import names

REPEATS, TOP_K = 3, 1  # the shared search's confirm section (tests/conftest.py)


@pytest.fixture(scope="module")
def searched(finished_search):
    """The test run's finished search (tests/conftest.py): confirmation re-ran its best recipe and the
    baseline, `repeats` times each, interleaved."""
    assert (finished_search.repeats, finished_search.top_k) == (REPEATS, TOP_K)
    return finished_search


def test_confirm_runs_are_child_runs_interleaved(searched):
    parent = searched.runs(names.KIND_SEARCH)[0]
    confirm = searched.runs(names.KIND_CONFIRM)
    # every recipe, the baseline included, `repeats` fresh runs: no search trial is pooled in as a sample
    assert len(confirm) == (TOP_K + 1) * REPEATS
    assert names.TAG_CONFIRM_CARRIED not in parent.data.tags
    trial_ids = {r.data.tags[names.TAG_TRIAL_ID] for r in searched.runs(names.KIND_TRIAL)}
    for run in confirm:
        tags = run.data.tags
        assert tags[names.TAG_PARENT] == parent.info.run_id
        assert tags[names.TAG_SEARCH_ID] == parent.data.tags[names.TAG_SEARCH_ID]
        assert tags[names.TAG_TRIAL_ID] in trial_ids
        assert tags[names.TAG_STATUS] in ("reached", "not_reached")
        assert "batch_size" in run.data.params and "seed" in run.data.params
        assert names.M_BEST_VAL_ACCURACY in run.data.metrics
    assert sum(r.data.tags[names.TAG_BASELINE] == "true" for r in confirm) == REPEATS
    # new seeds, one per repeat, never the search's seed
    assert {r.data.params["seed"] for r in confirm} == {str(1000 + i) for i in range(REPEATS)}
    # interleaved by rounds, by start time: A B | A B | A B
    by_start = sorted(confirm, key=lambda r: r.info.start_time)
    rounds = [int(r.data.tags[names.TAG_CONFIRM_REPEAT]) for r in by_start]
    assert rounds == sorted(rounds) and all(rounds.count(r) == TOP_K + 1 for r in range(REPEATS))
    assert [r.data.tags[names.TAG_BASELINE] for r in by_start] == ["false", "true"] * REPEATS


def _confirm_samples(searched, baseline: bool | None, metric: str, trial_id: str | None = None) -> list[float]:
    """The samples of the search's latest confirmation (another test in this worker may have confirmed the shared
    search again, over more trials: each confirm run says how many trials it chose from); `baseline`: only the
    baseline's runs (True), only the others' (False), either (None); `trial_id`: only that trial's runs (the
    exported winner's, not another candidate's)."""
    latest = int(searched.runs(names.KIND_SEARCH)[0].data.metrics[names.M_CONFIRM_TRIALS])
    return [r.data.metrics[metric] for r in searched.runs(names.KIND_CONFIRM)
            if (baseline is None or r.data.tags[names.TAG_BASELINE] == str(baseline).lower())
            and int(r.data.tags.get(names.TAG_CONFIRM_TRIALS, latest)) == latest
            and (trial_id is None or r.data.tags[names.TAG_TRIAL_ID] == trial_id)]


def test_export_measured_has_confirmation_from_the_confirmation_runs_alone(searched, tmp_path):
    """Every exported figure is recomputed here from the confirmation runs MLflow holds: the medians, the
    interval (outcome.speedup_interval over exactly those samples, the baseline's trial not among them)
    and the wall-to-target speed-up."""
    from autospeed.outcome import speedup_interval

    assert "confirmed best" in searched.stdout and "median TTA" in searched.stdout
    out = tmp_path / "best.yaml"
    proc = searched.main("export", "--name", searched.name, "--tracking-uri", searched.uri, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    measured = yaml.safe_load(out.read_text())["measured"]
    assert measured["confirmed"] is True and measured["repeats"] == REPEATS
    # the winner's own runs: the shared search's digits baseline reaches its target in its first epoch, so on a
    # loaded machine the baseline itself may win confirmation (then the speed-up is 1)
    winner = measured["trial_id"]
    base, best = _confirm_samples(searched, True, names.M_TTA), _confirm_samples(searched, None, names.M_TTA, winner)
    assert len(base) == len(best) == REPEATS
    assert measured["baseline_tta_seconds_median"] == pytest.approx(statistics.median(base))
    assert measured["tta_seconds_median"] == pytest.approx(statistics.median(best))
    assert (measured["tta_seconds_min"], measured["tta_seconds_max"]) == pytest.approx((min(best), max(best)))
    assert measured["speedup_vs_baseline"] == pytest.approx(statistics.median(base) / statistics.median(best))
    low, high = speedup_interval(base, best)
    assert low is not None and high is not None
    assert (measured["speedup_ci_low"], measured["speedup_ci_high"]) == pytest.approx((low, high))
    base_wall = _confirm_samples(searched, True, "wall_to_target_seconds")
    best_wall = _confirm_samples(searched, None, "wall_to_target_seconds", winner)
    assert all(w >= tta for w, tta in zip(best_wall, best))  # start-up, data and evaluations included
    assert measured["wall_speedup_vs_baseline"] == pytest.approx(
        statistics.median(base_wall) / statistics.median(best_wall))
    assert "on the train clock" in proc.stdout and "on the wall to target" in proc.stdout
    parent = searched.runs(names.KIND_SEARCH)[0]
    assert measured["trial_id"] == parent.data.tags["autospeed.confirmed_best_trial"]
    assert measured["environment"]["device"] == "cpu"


def test_the_search_writes_its_confirmed_best_recipe_itself(searched):
    """run_search owns the whole pipeline: best.yaml beside the search is the confirmed one."""
    (best,) = (searched.folder / "runs" / searched.name).glob("*/best.yaml")
    assert f"best recipe: {best}" in searched.stdout
    measured = yaml.safe_load(best.read_text())["measured"]
    assert measured["confirmed"] is True and measured["repeats"] == REPEATS
    parent = searched.runs(names.KIND_SEARCH)[0]
    assert parent.info.status == "FINISHED" and parent.data.metrics[names.M_CONFIRM_REPEATS] == REPEATS


def test_train_warns_when_measured_elsewhere_and_keeps_the_threads_confirmation_measured_with(searched, tmp_path):
    """Confirmation times a CPU recipe with every core; `autospeed train` of its export trains with as many torch
    threads where the machine has as many CPUs (torch's own default may differ: the physical cores, an inherited
    OMP_NUM_THREADS). A user's OMP_NUM_THREADS is theirs to keep, and the run then says its measured speed may not
    hold, as it does for another device."""
    (best,) = (searched.folder / "runs" / searched.name).glob("*/best.yaml")
    data = yaml.safe_load(best.read_text())
    assert data["measured"]["environment"]["torch_threads"] == os.cpu_count()
    data["measured"]["environment"]["torch_threads"] = 1  # as a search with resources.cpus_per_trial: 1 measures it
    one = tmp_path / "one_thread.yaml"
    one.write_text(yaml.safe_dump(data, sort_keys=False))
    same = searched.cli("train", "--config", str(one), "--no-track")
    assert same.returncode == 0, same.stderr
    assert ", 1 torch threads " in same.stdout and "measured elsewhere" not in same.stderr

    data = yaml.safe_load(best.read_text())
    data["measured"]["environment"]["device_name"] = "Imaginary Accelerator 9000"
    moved = tmp_path / "moved.yaml"
    moved.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = subprocess.run([sys.executable, "-m", "autospeed", "train", "--config", str(moved), "--no-track"],
                          cwd=searched.folder, env={**searched.env, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr and "measured elsewhere" in proc.stderr
    assert "device_name: Imaginary Accelerator 9000 ->" in proc.stderr
    if os.cpu_count() > 1:  # the user's one thread, not the measurement's
        assert ", 1 torch threads " in proc.stdout and f"torch_threads: {os.cpu_count()} -> 1" in proc.stderr


def test_explain_ablates_a_finished_searchs_confirmed_winner_and_export_carries_it(searched, tmp_path,
                                                                                 cli_in_process, monkeypatch):
    """`autospeed explain`, the ablation as its own command: on a copy of the shared search (its store and
    folder; the copy leaves the shared one as other tests read it), one round of the winner beside each knob
    set back, recorded on the parent where `autospeed export` finds it; a search that does not exist is one
    line and exit 1."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(searched.folder, copy)
    uri = f"sqlite:///{copy / 'mlflow.db'}"
    assert searched.uri.endswith("/mlflow.db")
    run = [sys.executable, "-m", "autospeed"]
    monkeypatch.chdir(copy)  # a search that does not exist stops before anything trains: main() in this process
    missing = cli_in_process("explain", "--name", "nonesuch", "--tracking-uri", uri, "--storage-path",
                             str(copy / "runs"))
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1, missing.stderr
    assert "no search named 'nonesuch'" in missing.stderr
    proc = subprocess.run([*run, "explain", "--name", searched.name, "--tracking-uri", uri, "--storage-path",
                           str(copy / "runs"), "--repeats", "1"], cwd=copy, env=searched.env, capture_output=True,
                          text=True, timeout=300)
    parent = searched.runs(names.KIND_SEARCH)[0]
    baseline = next(r for r in searched.runs(names.KIND_TRIAL) if r.data.tags[names.TAG_BASELINE] == "true")
    if parent.data.tags[names.TAG_CONFIRMED_BEST] == baseline.data.tags[names.TAG_TRIAL_ID]:
        # under load the shared search's baseline has won its confirmation (its digits baseline reaches the
        # target in its first epoch): nothing to explain, said in one line
        assert proc.returncode == 1 and "is the baseline itself; nothing to explain" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ablation: the winner with each of" in proc.stdout and "winner (same rounds)" in proc.stdout, proc.stdout
    assert f"recorded on search '{searched.name}'" in proc.stdout
    from mlflow.tracking import MlflowClient

    from autospeed.recipe import Measured
    from autospeed.track.export import _add_ablation

    client = MlflowClient(tracking_uri=uri)
    parent = client.search_runs([client.get_experiment_by_name(searched.name).experiment_id],
                                filter_string=f"tags.`{names.TAG_KIND}` = '{names.KIND_SEARCH}'")[0]
    measured = Measured()
    _add_ablation(measured, parent.data.tags[names.TAG_ABLATION])  # what `autospeed export` writes from it
    assert measured.ablation  # knob -> speed-up lost
    ablation = client.search_runs([parent.info.experiment_id], filter_string=f"tags.`{names.TAG_KIND}` = 'ablation'")
    assert {r.data.tags[names.TAG_ABLATION_KNOB] for r in ablation} == {*measured.ablation, "none"}
    # the original search: no ablation run
    assert not any(r.data.tags.get(names.TAG_KIND) == names.KIND_ABLATION for r in searched.runs())


def test_a_resumed_confirmation_trains_only_the_runs_a_kill_cost_and_closes_the_one_left_running(
        searched, tmp_path, monkeypatch):
    """A search SIGKILLed in its last confirmation round, then resumed: the finished runs are kept as samples, the
    run left RUNNING is closed KILLED, and only the missing runs train again (before, every run trained again: 14
    finished confirmation runs where 9 were planned, and runs RUNNING forever)."""
    import shutil
    import time

    from mlflow.tracking import MlflowClient

    from autospeed.search.confirm import run_confirmation
    from autospeed.search.session import SearchSession
    from autospeed.search.storage import SearchDir
    from autospeed.space import SearchSpec

    shutil.copyfile(searched.folder / "mlflow.db", tmp_path / "mlflow.db")  # the shared search stays as it is
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = searched.runs(names.KIND_SEARCH)[0]
    latest = str(int(parent.data.metrics[names.M_CONFIRM_TRIALS]))

    def confirm_runs():
        runs = client.search_runs([parent.info.experiment_id], max_results=1000,
                                  filter_string=f"tags.`{names.TAG_KIND}` = 'confirm'")
        return [r for r in runs if r.data.tags[names.TAG_CONFIRM_TRIALS] == latest]

    by_round = sorted(confirm_runs(), key=lambda r: r.info.start_time)
    assert len(by_round) == (TOP_K + 1) * REPEATS
    *_, in_flight, never_started = by_round  # killed during the last round's first run: the second never began
    client.delete_run(never_started.info.run_id)
    client.update_run(in_flight.info.run_id, status="RUNNING")
    monkeypatch.syspath_prepend(str(searched.folder))  # the probe plugin, for the fresh training processes too
    started = time.time() * 1000

    session = SearchSession.direct(client, parent, parent.data.tags[names.TAG_SEARCH_ID], SearchDir(tmp_path),
                                   open(os.devnull, "w"))
    outcome = run_confirmation(session, SearchSpec.model_validate(searched.space))

    after = confirm_runs()
    assert client.get_run(in_flight.info.run_id).info.status == "KILLED"
    trained = [r for r in after if r.info.start_time >= started]
    assert len(trained) == 2  # the killed run and the one never started; the other 4 were kept
    assert sum(r.info.status == "FINISHED" for r in after) == (TOP_K + 1) * REPEATS
    assert outcome.repeats == REPEATS and all(len(c.ttas) == REPEATS for c in outcome.candidates)
