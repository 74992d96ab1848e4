"""The probe stage (search/probe.py) and micro-batching in a search, against real Ray, Optuna and MLflow.

The probe's end-to-end checks read the test run's finished search (tests/conftest.py): its plugin's
model (probe_plugin) sleeps 0.5 s in every training forward pass unless scaled_dot_product_attention
is pinned to the math backend (attention: math; `auto` leaves every backend on): a step of its small
MLP takes about a millisecond without the sleep (and under 0.1 s on a 2-core machine loaded 5-fold),
so math is the faster systems setting by a factor far beyond any timing noise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from autospeed.search import probe as p
from autospeed.space import spec_from_dict

from .test_run import autospeed, runs_of

def search(folder: Path, space: dict, plugin: str) -> tuple:
    (folder / "probe_plugin.py").write_text(plugin)
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
    proc = autospeed("search", "--space", str(path), "--tracking-uri", f"sqlite:///{folder / 'mlflow.db'}",
                     "--storage-path", str(folder / "runs"), cwd=folder, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc, runs_of(folder, space["name"])


BASE = {"workload": "probe_plugin:digits", "target_accuracy": 0.9, "asha": {"enabled": False},
        "sampler": {"seed": 0, "n_startup_trials": 3}, "confirm": {"top_k": 1, "repeats": 0},
        "resources": {"gpus_per_trial": 0}, "fixed": {"epochs": 30, "eval_every_epochs": 1}}


def test_the_probe_fixes_a_maths_neutral_knob_at_its_fastest_value(finished_search):
    """The shared search's space (tests/conftest.py) offers attention auto and math; its plugin's model
    sleeps in training unless attention is pinned to math."""
    trials = finished_search.runs("trial")
    assert len(trials) == 6
    assert {r.data.params["attention"] for r in trials} == {"math"}  # every trial, never the slow `auto`
    assert "probe fixed: attention=math" in finished_search.stdout


def test_probes_are_child_runs_of_kind_probe_with_their_measurements(finished_search):
    parent = finished_search.runs("search")[0]
    probes = finished_search.runs("probe")
    # two systems configurations (attention auto, math) at each batch size of the space
    assert sorted((r.data.params["attention"], r.data.params["batch_size"]) for r in probes) == [
        ("auto", "32"), ("auto", "64"), ("math", "32"), ("math", "64")]
    for run in probes:
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["autospeed.status"] == "ok" and run.data.metrics["oom"] == 0
        assert run.data.metrics["samples_per_second"] > 0 and "compile_seconds" in run.data.metrics
    speed = {(r.data.params["attention"], r.data.params["batch_size"]): r.data.metrics["samples_per_second"]
             for r in probes}
    assert speed[("math", "32")] > speed[("auto", "32")]
    assert parent.data.metrics["probe_seconds"] > 0  # what the probe stage cost, for payback sums


@pytest.fixture(scope="module")
def micro_batched(tmp_path_factory, probe_plugin):
    """Room for 64 samples per pass; the space's only batch size is 128; the probe is off."""
    folder = tmp_path_factory.mktemp("micro")
    space = {"name": "micro", **BASE, "workload_options": {"max_micro_batch": 64},
             "budget": {"trials": 2, "max_train_seconds": 60}, "probe": {"enabled": False},
             # a baseline that cannot reach the target (and ends soon): the micro-batched trial is the best
             "baseline": {"batch_size": 32, "lr": 0.00001, "attention": "math", "epochs": 2},
             "fixed": {**BASE["fixed"], "attention": "math", "micro_batch_size": "auto"},
             "space": {"batch_size": {"choice": [128]}, "lr": {"loguniform": [0.1, 0.3]}}}
    proc, runs = search(folder, space, probe_plugin)
    return folder, proc, runs


def test_batches_that_do_not_fit_train_micro_batched_and_export_the_micro_batch(micro_batched):
    folder, _, runs = micro_batched
    (trial,) = [r for r in runs if r.data.tags.get("autospeed.kind") == "trial"
                and r.data.tags["autospeed.baseline"] == "false"]
    assert trial.data.tags["autospeed.status"] == "reached"  # not oom
    assert trial.data.tags["autospeed.applied.micro_batch_size"] == "64"
    assert trial.data.tags["autospeed.applied.accumulation_steps"] == "2"
    best = yaml.safe_load(next((folder / "runs" / "micro").glob("*/best.yaml")).read_text())
    assert best["batch_size"] == 128 and best["micro_batch_size"] == 64


def test_an_unconfirmed_export_is_one_search_measurement_never_a_median(micro_batched):
    """No confirmation runs (repeats 0): the one search measurement is not dressed as a median."""
    folder, _, _ = micro_batched
    out = folder / "exported.yaml"
    proc = autospeed("export", "--name", "micro", "--tracking-uri", f"sqlite:///{folder / 'mlflow.db'}",
                     "--out", str(out), cwd=folder)
    assert proc.returncode == 0, proc.stderr
    m = yaml.safe_load(out.read_text())["measured"]
    assert m["confirmed"] is False and m["tta_seconds"] > 0
    assert not {"tta_seconds_median", "tta_seconds_min", "tta_seconds_max", "repeats",
                "baseline_tta_seconds_median", "speedup_vs_baseline"} & set(m)
    assert "unconfirmed" in out.read_text().splitlines()[1]


def test_with_the_probe_off_no_probe_runs(micro_batched):
    folder, proc, runs = micro_batched
    assert not [r for r in runs if r.data.tags.get("autospeed.kind") == "probe"]
    assert "probe:" not in proc.stdout and "probe fixed" not in proc.stdout
    parent = next(r for r in runs if r.data.tags.get("autospeed.kind") == "search")
    assert "autospeed.probe_fixed" not in parent.data.tags and "probe_seconds" not in parent.data.metrics


# ---------------------------------------------------------------- deciding, on given measurements
SPACE = {"name": "x", "workload": "digits", "target_accuracy": 0.9, "budget": {"max_train_seconds": 30},
         "baseline": {"batch_size": 32},
         "space": {"batch_size": {"choice": [32, 64, 256]}, "compile": {"choice": ["none", "default"]},
                   "data_loader": {"choice": ["device", "dataloader"]},
                   "num_workers": {"choice": [0, 2], "when": {"data_loader": ["dataloader"]}},
                   "lr": {"loguniform": [0.01, 0.1]}}}


def measured(config: dict, speeds: dict, compile_seconds: float = 0.0) -> list[p.Probe]:
    return [p.Probe(config, b, p.OOM) if s is None else p.Probe(config, b, p.OK, s, compile_seconds)
            for b, s in speeds.items()]


def test_configurations_start_at_the_baseline_and_move_one_knob_at_a_time_within_max_configs():
    spec = spec_from_dict(SPACE, "x.yaml")
    configs = p.configurations(spec, max_configs=24)
    assert configs == [{"compile": "none", "data_loader": "device"},
                       {"compile": "default", "data_loader": "device"},
                       {"compile": "none", "data_loader": "dataloader", "num_workers": 0},
                       {"compile": "none", "data_loader": "dataloader", "num_workers": 2}]
    assert p.configurations(spec, max_configs=3) == configs[:2]  # a slot kept for the combination


@pytest.mark.parametrize("compile_seconds,winner", [(5.0, "default"), (20.0, "none")])
def test_a_compile_mode_wins_only_when_its_compile_seconds_are_repaid_within_the_budget(compile_seconds, winner):
    """Twice the speed saves half of a 30 s budget: 15 s. Compiling in 5 s pays; in 20 s it does not."""
    spec = spec_from_dict(SPACE, "x.yaml")
    base, compiled = {"compile": "none"}, {"compile": "default"}
    probes = measured(base, {32: 100.0, 64: 200.0}) + measured(compiled, {32: 200.0, 64: 400.0}, compile_seconds)
    assert p.fastest([base, compiled], probes, spec.budget.max_train_seconds)["compile"] == winner


def test_a_configuration_that_runs_out_of_memory_where_the_baseline_fits_never_wins():
    base, wide = {"compile": "none"}, {"compile": "default"}
    probes = measured(base, {32: 100.0, 64: 100.0}) + measured(wide, {32: 900.0, 64: None})
    assert p.fastest([base, wide], probes, 30.0) == base


def test_batch_sizes_that_do_not_fit_get_the_largest_fitting_micro_batch_dividing_them():
    spec = spec_from_dict(SPACE, "x.yaml")
    fits_64 = p.speeds(measured({}, {32: 1.0, 64: 1.0, 256: None}))[p._key({})]
    assert p.micro_batch_for(fits_64) == 64
    space = p.narrowed(spec, {"compile": "none", "data_loader": "device"}, 64).space
    assert space["compile"].choice == ["none"] and space["data_loader"].choice == ["device"]
    assert "num_workers" not in space  # its condition (data_loader: dataloader) can no longer hold
    assert space["micro_batch_size"].choice == [64] and space["lr"] == spec.space["lr"]


def test_the_probe_is_off_when_disabled_or_with_nothing_to_decide():
    assert p.wants_probe(spec_from_dict(SPACE, "x.yaml"))
    assert not p.wants_probe(spec_from_dict({**SPACE, "probe": {"enabled": False}}, "x.yaml"))
    assert not p.wants_probe(spec_from_dict({**SPACE, "space": {"lr": {"loguniform": [0.01, 0.1]}}}, "x.yaml"))


def test_a_resumed_search_searches_the_space_its_probe_narrowed_without_probing_again(tmp_path):
    from autospeed.search.run import PROBED_SPACE, _probed
    from autospeed.search.storage import SearchDir

    spec = spec_from_dict(SPACE, "x.yaml")
    decided = p.narrowed(spec, {"compile": "default", "data_loader": "device"}, 64)
    folder = SearchDir(tmp_path)
    folder.write_state({"search_id": "s1", PROBED_SPACE: decided.model_dump(mode="json")["space"]})

    # no MLflow client and no Ray: a second probe would fail here
    again = _probed(spec, None, "parent", "s1", folder, {"cpu": 1, "gpu": 0}, 1, None)

    assert again.space == decided.space and again.space["compile"].choice == ["default"]
