"""Confirmation runs end to end: the test run's finished search (tests/conftest.py), its MLflow
confirmation child runs, the exported `measured` section, and the environment warning of
`autospeed train` (DESIGN.md "Confirmation runs", "Exported recipe")."""

from __future__ import annotations

import os
import statistics

import pytest
import yaml

from autospeed.track import layout as t
from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.search.confirm import Candidate, _decide, fresh_process_for
from autospeed.train.process import LeanProcess, train_in_fresh_process


REPEATS, TOP_K = 2, 1  # the shared search's confirm section (tests/conftest.py)


@pytest.fixture(scope="module")
def searched(finished_search):
    """The test run's finished search (tests/conftest.py): confirmation re-ran its best recipe and the
    baseline, `repeats` times each, interleaved."""
    assert (finished_search.repeats, finished_search.top_k) == (REPEATS, TOP_K)
    return finished_search


def test_confirm_runs_are_child_runs_interleaved(searched):
    parent = searched.runs(t.KIND_SEARCH)[0]
    confirm = searched.runs(t.KIND_CONFIRM)
    # the baseline's trial is its first sample (it was not picked as the best of many): one run fewer
    assert len(confirm) == (TOP_K + 1) * REPEATS - 1
    baseline_trial = next(r for r in searched.runs(t.KIND_TRIAL) if r.data.tags[t.TAG_BASELINE] == "true")
    assert parent.data.tags[t.TAG_CONFIRM_CARRIED] == baseline_trial.data.tags[t.TAG_TRIAL_ID]
    trial_ids = {r.data.tags[t.TAG_TRIAL_ID] for r in searched.runs(t.KIND_TRIAL)}
    for run in confirm:
        tags = run.data.tags
        assert tags[t.TAG_PARENT] == parent.info.run_id
        assert tags[t.TAG_SEARCH_ID] == parent.data.tags[t.TAG_SEARCH_ID]
        assert tags[t.TAG_TRIAL_ID] in trial_ids
        assert tags[t.TAG_STATUS] in ("reached", "not_reached")
        assert "batch_size" in run.data.params and "seed" in run.data.params
        assert t.M_BEST_VAL_ACCURACY in run.data.metrics
    assert sum(r.data.tags[t.TAG_BASELINE] == "true" for r in confirm) == REPEATS - 1
    # new seeds, one per repeat, never the search's seed
    assert {r.data.params["seed"] for r in confirm} == {str(1000 + i) for i in range(REPEATS)}
    # interleaved by rounds, by start time: A | A B (the baseline's round 0 is its trial)
    by_start = sorted(confirm, key=lambda r: r.info.start_time)
    rounds = [int(r.data.tags[t.TAG_CONFIRM_REPEAT]) for r in by_start]
    assert rounds == sorted(rounds) and rounds.count(0) == TOP_K and rounds.count(1) == TOP_K + 1
    assert [r.data.tags[t.TAG_BASELINE] for r in by_start][-1] == "true"


def test_export_measured_has_confirmation(searched, tmp_path):
    assert "confirmed best" in searched.stdout and "median TTA" in searched.stdout
    out = tmp_path / "best.yaml"
    proc = searched.cli("export", "--name", searched.name, "--tracking-uri", searched.uri, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    measured = yaml.safe_load(out.read_text())["measured"]
    assert measured["confirmed"] is True and measured["repeats"] == REPEATS
    assert measured["speedup_ci_low"] <= measured["speedup_vs_baseline"] <= measured["speedup_ci_high"]
    assert measured["tta_seconds_min"] <= measured["tta_seconds_median"] <= measured["tta_seconds_max"]
    assert measured["baseline_tta_seconds_median"] > 0
    baseline_ttas = [r.data.metrics[t.M_TTA] for r in searched.runs(t.KIND_TRIAL) + searched.runs(t.KIND_CONFIRM)
                     if r.data.tags[t.TAG_BASELINE] == "true"]  # its trial's and its confirmation runs'
    assert len(baseline_ttas) == REPEATS
    assert measured["baseline_tta_seconds_median"] == pytest.approx(statistics.median(baseline_ttas))
    assert measured["speedup_vs_baseline"] == pytest.approx(
        measured["baseline_tta_seconds_median"] / measured["tta_seconds_median"])
    parent = searched.runs(t.KIND_SEARCH)[0]
    assert measured["trial_id"] == parent.data.tags["autospeed.confirmed_best_trial"]
    assert measured["environment"]["device"] == "cpu"


def test_the_search_writes_its_confirmed_best_recipe_itself(searched):
    """run_search owns the whole pipeline: best.yaml beside the search is the confirmed one."""
    (best,) = (searched.folder / "runs" / searched.name).glob("*/best.yaml")
    assert f"best recipe: {best}" in searched.stdout
    measured = yaml.safe_load(best.read_text())["measured"]
    assert measured["confirmed"] is True and measured["repeats"] == REPEATS
    parent = searched.runs(t.KIND_SEARCH)[0]
    assert parent.info.status == "FINISHED" and parent.data.metrics[t.M_CONFIRM_REPEATS] == REPEATS


def test_train_warns_when_measured_elsewhere(searched, tmp_path):
    (best,) = (searched.folder / "runs" / searched.name).glob("*/best.yaml")
    same = searched.cli("train", "--config", str(best), "--no-track")
    assert same.returncode == 0, same.stderr
    assert "measured elsewhere" not in same.stderr

    data = yaml.safe_load(best.read_text())
    data["measured"]["environment"]["device_name"] = "Imaginary Accelerator 9000"
    moved = tmp_path / "moved.yaml"
    moved.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = searched.cli("train", "--config", str(moved), "--no-track")
    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr and "measured elsewhere" in proc.stderr
    assert "device_name: Imaginary Accelerator 9000 ->" in proc.stderr


def _cand(trial_id: str, ttas, baseline=False) -> Candidate:
    return Candidate(trial_id, baseline, None, Recipe(), ttas=list(ttas))


def test_winner_decided_on_median_not_best_single_run():
    lucky = _cand("lucky", [1.0, 5.0, 5.0])  # best single run, worse median
    steady = _cand("steady", [2.0, 2.1, 2.2])
    base = _cand("base", [8.0, None, 9.0], baseline=True)  # one miss counts as slowest
    out = _decide([lucky, steady, base], 3)
    assert out.winner is steady
    assert base.median == 9.0
    assert out.speedup == pytest.approx(9.0 / 2.1)


def test_median_missing_when_most_runs_miss_target():
    c = _cand("x", [None, None, 3.0])
    assert c.median is None and c.reached == [3.0]


def test_confirmation_runs_train_outside_the_driver_in_one_lean_process_on_a_cpu_and_fresh_ones_on_a_gpu(
        write_plugin, tmp_path):
    """Confirmation runs never train in the driver (its Ray and MLflow state slows small steps down): on a CPU
    one lean process trains them all; on a GPU each pays a production run's cold start in a new process."""
    write_plugin("pid_plugin", """
        import os
        import torch
        from torch import nn
        from autospeed.workloads import Workload

        def pids(out: str = ""):
            def build():
                with open(out, "a") as f:
                    f.write(f"{os.getpid()}\\n")
                return nn.Linear(3, 2)
            x, y = torch.randn(64, 3), (torch.arange(64) % 2)
            x[:, 0] += y * 4  # separable: reaches the target
            return Workload(name="pids", train_x=x, train_y=y, val_x=x, val_y=y, num_classes=2, build_model=build)
    """)
    out = tmp_path / "pids.txt"
    recipe = Recipe(workload="pid_plugin:pids", workload_options={"out": str(out)}, target_accuracy=0.9,
                    batch_size=16, lr=0.1, epochs=20, eval_every_epochs=1, device="cpu")

    with LeanProcess() as lean:
        results = [lean.train(recipe.model_copy(update={"seed": s}), 1) for s in (1, 2)]
    assert all(r.status == Status.REACHED and r.tta_seconds is not None for r in results)
    lean_pids = [int(p) for p in out.read_text().split()]
    assert len(lean_pids) == 2 and len(set(lean_pids)) == 1 and os.getpid() not in lean_pids
    assert fresh_process_for(recipe) is False  # on a CPU: the lean process trains

    out.unlink()
    results = [train_in_fresh_process(recipe, 1) for _ in range(2)]
    assert all(r.status == Status.REACHED for r in results)
    fresh_pids = [int(p) for p in out.read_text().split()]
    assert len(set(fresh_pids)) == 2 and os.getpid() not in fresh_pids




# ---------------------------------------------------------------- confirm.max_repeats
def test_rounds_are_added_while_the_winner_overlaps_the_runner_up_up_to_max_repeats():
    """Two recipes whose TTAs alternate so that neither's speed-up interval ever separates: the
    confirmation adds interleaved rounds up to max_repeats, then stops."""
    a, b, base = _cand("a", []), _cand("b", []), _cand("base", [], baseline=True)
    ttas = {"a": [2.0, 3.0], "b": [3.0, 2.0], "base": [8.0, 8.0]}  # per round parity: a and b swap places
    order = []

    def run_round(r: int) -> None:
        for c in (a, b, base):
            c.ttas.append(ttas[c.trial_id][r % 2])
            order.append(c.trial_id)

    from autospeed.search.confirm import confirm_rounds

    assert confirm_rounds([a, b, base], repeats=2, max_repeats=5, run_round=run_round) == 5
    assert order == ["a", "b", "base"] * 5  # interleaved, every round


def test_no_round_is_added_once_the_winner_separates_from_the_runner_up():
    fast, slow, base = _cand("fast", []), _cand("slow", []), _cand("base", [], baseline=True)
    ttas = {"fast": [1.0, 1.1], "slow": [4.0, 4.2], "base": [8.0, 8.4]}

    def run_round(r: int) -> None:
        for c in (fast, slow, base):
            c.ttas.append(ttas[c.trial_id][r % 2])

    from autospeed.search.confirm import confirm_rounds, separated

    assert confirm_rounds([fast, slow, base], repeats=2, max_repeats=5, run_round=run_round) == 2
    assert separated([fast, slow, base])
