"""A long job's search (predict on): no trial reaches the target inside its budget, yet the trials are ranked by
their predicted TTA, every trial says where its TTA came from, and confirmation's full production runs export a
measured winner. One real search (Ray, Optuna, MLflow) on digits through the CLI."""

from __future__ import annotations

import pytest
import yaml

from tests.search.test_run import autospeed, client_for, runs_of, write_space

BUDGET_SECONDS = 0.6  # per trial: far below what the target needs at these learning rates
PRODUCTION_SECONDS = 30.0  # confirm.max_train_seconds: the production budget


@pytest.fixture(scope="module")
def long_search(tmp_path_factory, new_store, cli_in_process):
    """The long job's search through the CLI, then its export, which never trains: its main() runs in this
    process (tests/conftest.py cli_in_process), less a Python start-up."""
    folder = tmp_path_factory.mktemp("long")
    space = write_space(
        folder, name="long", target_accuracy=0.975, budget={"trials": 4, "max_train_seconds": BUDGET_SECONDS},
        asha={"enabled": False}, sampler={"kind": "random", "seed": 0}, probe={"enabled": False},
        predict={"enabled": True, "min_evaluations": 4, "max_interval_ratio": 10},
        # the baseline's TTA given, not re-run: its slow SGD would spend the whole production budget
        confirm={"top_k": 1, "repeats": 1, "max_train_seconds": PRODUCTION_SECONDS, "baseline_tta_seconds": 29.0,
                 "baseline_tta_note": "a production run's TTA, given by this test"},
        # far from 0.975 in 0.4 s; wsd (its decay far past the budget): one trial sure to take a cooldown branch
        baseline={"batch_size": 32, "optimizer": "sgd", "lr": 0.005, "schedule": "wsd"},
        fixed={"epochs": 200, "eval_every_epochs": 0.1, "optimizer": "adamw"},  # many evaluations, even under load
        space={"batch_size": {"choice": [32, 64]}, "lr": {"loguniform": [0.0005, 0.001]},
               "schedule": {"choice": ["constant", "wsd"]}})
    uri = new_store(folder)
    search = autospeed("search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(folder / "runs"),
                       cwd=folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        export = cli_in_process("export", "--name", "long", "--tracking-uri", uri, "--out", str(folder / "best.yaml"))
    return {"folder": folder, "search": search, "export": export, "client": client_for(folder),
            "runs": runs_of(folder, "long")}


def test_no_trial_reaches_yet_every_trial_says_where_its_tta_comes_from(long_search):
    assert long_search["search"].returncode == 0, long_search["search"].stderr
    trials = [r for r in long_search["runs"] if r.data.tags["autospeed.kind"] == "trial"]
    assert len(trials) == 4
    predicted, censored = [], []
    cap = 20 * BUDGET_SECONDS  # predict's default cap
    for run in trials:
        tags, metrics = run.data.tags, run.data.metrics
        assert tags["autospeed.status"] != "reached"
        assert "tta_seconds" not in metrics  # that name stays for measurements
        assert tags["autospeed.tta_source"] in ("predicted", "none")
        if tags["autospeed.tta_source"] == "predicted":
            predicted.append(run)
            low, mid, high = (metrics[f"tta_predicted{s}_seconds"] for s in ("_low", "", "_high"))
            assert BUDGET_SECONDS * 0.9 < low <= mid <= high <= cap
            assert metrics["objective"] == pytest.approx(min(mid, cap))
        else:
            censored.append(run)
            # every trial is scored at equal horizon (autospeed/horizon.py): no abstention for the curve's shape,
            # only its own schedule ending the run first or a crossing past the cap, and the note says which
            note = tags["autospeed.tta_note"]
            assert any(w in note for w in ("schedule", "past the cap")), note
            assert not any(k.startswith("tta_predicted") for k in metrics)
            assert metrics["objective"] > cap  # censored at the cap: below every trial that may reach
    assert len(predicted) + len(censored) == 4
    # what a person reads: each trial that did not reach shows its prediction (~) or why it has none
    stdout = long_search["search"].stdout
    assert "~" in stdout or not predicted
    assert "no prediction" in stdout or not censored


def test_the_winner_is_confirmed_by_production_runs_and_exported_measured(long_search):
    confirms = [r for r in long_search["runs"] if r.data.tags["autospeed.kind"] == "confirm"]
    assert confirms
    for run in confirms:
        assert float(run.data.params["max_train_seconds"]) == PRODUCTION_SECONDS
    assert long_search["export"].returncode == 0, long_search["export"].stderr
    best = yaml.safe_load((long_search["folder"] / "best.yaml").read_text())
    assert best["max_train_seconds"] == PRODUCTION_SECONDS  # production trains to the real target
    assert best["measured"]["confirmed"] is True
    assert best["measured"]["tta_source"] == "measured"
    assert best["measured"]["tta_seconds_median"] > 0  # measured by the production runs


def test_a_wsd_trial_measures_its_cooldown_branch_and_is_ranked_by_it(long_search):
    """Each wsd trial, cut at its budget, measured a cooldown branch (predict.cooldown_fraction's default 0.2): its
    run carries the branch's accuracy and seconds, and a ranking that credits its decay says it used the measured
    factor; no constant trial branched (autospeed/train/cooldown.py)."""
    trials = [r for r in long_search["runs"] if r.data.tags["autospeed.kind"] == "trial"]
    wsd = [r for r in trials if r.data.params["schedule"] == "wsd"]
    assert wsd  # the baseline's at least
    for run in trials:
        metrics, note = run.data.metrics, run.data.tags["autospeed.tta_note"]
        if run.data.params["schedule"] == "wsd":
            assert 0 <= metrics["cooldown_val_accuracy"] <= 1 and metrics["cooldown_seconds"] > 0
            assert metrics["cooldown_total_seconds"] == pytest.approx(metrics["cooldown_seconds"])
            assert "typical factor" not in note, note
            assert "measured by a cooldown branch" in note or "past the cap" in note, note
        else:
            assert not any(k.startswith("cooldown_") for k in metrics)
