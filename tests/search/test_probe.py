"""The probe stage (search/probe.py) and micro-batching in a search, against real Ray, Optuna and MLflow.

The probe's end-to-end checks read the test run's finished search (tests/conftest.py): its plugin's
model (probe_plugin) sleeps 0.5 s in every training forward pass unless scaled_dot_product_attention
is pinned to the math backend (attention: math; `auto` leaves every backend on): a step of its small
MLP takes about a millisecond without the sleep (and under 0.1 s on a 2-core machine loaded 5-fold),
so math is the faster systems setting by a factor far beyond any timing noise.

The decision itself (the noise margin, the geometric mean over maths and rounds, the interleaved
rounds) is checked on given timings, in-process; probe_config runs for real once, on digits, to show
that the probed recipes train with the space's optimizers and precisions.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from autospeed.search import probe as p
from autospeed.space import spec_from_dict

from .test_run import autospeed, runs_of


def search(folder: Path, space: dict, plugin: str, uri: str) -> tuple:
    """The CLI's search of `space` on the store `uri` (folder/mlflow.db, where runs_of reads)."""
    (folder / "probe_plugin.py").write_text(plugin)
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
    proc = autospeed("search", "--space", str(path), "--tracking-uri", uri,
                     "--storage-path", str(folder / "runs"), cwd=folder, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc, runs_of(folder, space["name"])


BASE = {"workload": "probe_plugin:digits", "target_accuracy": 0.9, "asha": {"enabled": False},
        "sampler": {"seed": 0, "n_startup_trials": 3}, "confirm": {"top_k": 1, "repeats": 0},
        "resources": {"gpus_per_trial": 0}, "fixed": {"epochs": 30, "eval_every_epochs": 1}}


# auto's speed over math's, at most: auto sleeps 0.5 s per training step and math's step takes milliseconds, so the
# ratio is near 0.002 on a quiet machine; a loaded one (the suite's other worker) slowed math's steps to 0.23x once.
# Below 0.5 whatever the load: the decision, not the load, is what these tests check.
AUTO_AT_MOST = 0.5


def test_the_probe_fixes_a_maths_neutral_knob_at_its_fastest_value(finished_search):
    """The shared search's space (tests/conftest.py) offers attention auto and math; its plugin's model
    sleeps in training unless attention is pinned to math."""
    trials = finished_search.runs("trial")
    assert len(trials) == 6
    assert {r.data.params["attention"] for r in trials} == {"math"}  # every trial, never the slow `auto`
    # math is the default (the baseline's): auto, far slower, is stated against the noise it did not beat
    line = re.search(r"probe fixed: attention=math \(kept default: attention=auto (\d+\.\d+)x not faster",
                     finished_search.stdout)
    assert line and float(line[1]) < AUTO_AT_MOST, finished_search.stdout[-3000:]


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
    # the margin behind the fix: the default kept (speed-up 1), the noise measured over its rounds (3 timed
    # steps of a millisecond each: large, and finite)
    assert parent.data.metrics["probe_speedup"] == 1.0 and parent.data.metrics["probe_noise"] > 0
    margin = re.match(r"kept default: attention=auto (\d+\.\d+)x not faster",
                      parent.data.tags["autospeed.probe_margin"])
    assert margin and float(margin[1]) < AUTO_AT_MOST, parent.data.tags["autospeed.probe_margin"]


@pytest.fixture(scope="module")
def micro_batched(tmp_path_factory, probe_plugin, new_store):
    """Room for 64 samples per pass; the space's only batch size is 128; the probe is off."""
    folder = tmp_path_factory.mktemp("micro")
    space = {"name": "micro", **BASE, "workload_options": {"max_micro_batch": 64},
             "budget": {"trials": 2, "max_train_seconds": 60}, "probe": {"enabled": False},
             # a baseline that cannot reach the target (and ends soon): the micro-batched trial is the best
             "baseline": {"batch_size": 32, "lr": 0.00001, "attention": "math", "epochs": 2},
             "fixed": {**BASE["fixed"], "attention": "math", "micro_batch_size": "auto"},
             "space": {"batch_size": {"choice": [128]}, "lr": {"loguniform": [0.1, 0.3]}}}
    uri = new_store(folder)
    proc, runs = search(folder, space, probe_plugin, uri)
    return folder, proc, runs, uri


def test_batches_that_do_not_fit_train_micro_batched_and_export_the_micro_batch(micro_batched):
    folder, _, runs, _ = micro_batched
    (trial,) = [r for r in runs if r.data.tags.get("autospeed.kind") == "trial"
                and r.data.tags["autospeed.baseline"] == "false"]
    assert trial.data.tags["autospeed.status"] == "reached"  # not oom
    assert trial.data.tags["autospeed.applied.micro_batch_size"] == "64"
    assert trial.data.tags["autospeed.applied.accumulation_steps"] == "2"
    best = yaml.safe_load(next((folder / "runs" / "micro").glob("*/best.yaml")).read_text())
    assert best["batch_size"] == 128 and best["micro_batch_size"] == 64


def test_an_unconfirmed_export_is_one_search_measurement_never_a_median(micro_batched, cli_in_process, monkeypatch):
    """No confirmation runs (repeats 0): the one search measurement is not dressed as a median. The export never
    trains: its main() runs in this process (tests/conftest.py cli_in_process)."""
    folder, _, _, uri = micro_batched
    out = folder / "exported.yaml"
    monkeypatch.chdir(folder)
    proc = cli_in_process("export", "--name", "micro", "--tracking-uri", uri, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    m = yaml.safe_load(out.read_text())["measured"]
    assert m["confirmed"] is False and m["tta_seconds"] > 0
    assert not {"tta_seconds_median", "tta_seconds_min", "tta_seconds_max", "repeats",
                "baseline_tta_seconds_median", "speedup_vs_baseline"} & set(m)
    assert "unconfirmed" in out.read_text().splitlines()[1]


def test_with_the_probe_off_no_probe_runs(micro_batched):
    folder, proc, runs, _ = micro_batched
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
# fast.yaml's maths: the optimizers and precisions trials choose from, with other maths knobs beside them
MATHS_SPACE = {**SPACE, "baseline": {"batch_size": 32, "optimizer": "sgd", "precision": "fp32", "lr": 0.02,
                                     "schedule": "constant"},
               "space": {"batch_size": {"choice": [32, 64]}, "optimizer": {"choice": ["sgd", "adamw"]},
                         "lr": {"loguniform": [0.01, 0.1]}, "schedule": {"choice": ["cosine", "constant"]},
                         "warmup_fraction": {"uniform": [0.0, 0.2], "when": {"schedule": ["cosine"]}},
                         "precision": {"choice": ["fp32", "bf16"]},
                         "optimizer_impl": {"choice": ["default", "foreach"]}}}
SGD, ADAMW = {"optimizer": "sgd"}, {"optimizer": "adamw"}


def measured(config: dict, speeds: dict, compile_seconds: float = 0.0, rounds: tuple = (1.0, 1.0),
             maths: tuple = ({},)) -> list[p.Probe]:
    """Probes of `config` at each batch size (`speeds`: batch size -> samples/s, None: out of memory), under
    each maths, in each round (round r's samples/s: the given x rounds[r], the machine's speed then)."""
    return [p.Probe(config, b, p.OOM, maths=m, round=r) if s is None else
            p.Probe(config, b, p.OK, s * factor, compile_seconds, maths=m, round=r)
            for r, factor in enumerate(rounds) for m in maths for b, s in speeds.items()]


def test_configurations_start_at_the_baseline_and_move_one_knob_at_a_time_within_max_configs():
    spec = spec_from_dict(SPACE, "x.yaml")
    configs = p.configurations(spec, max_configs=24)
    assert configs == [{"compile": "none", "data_loader": "device"},
                       {"compile": "default", "data_loader": "device"},
                       {"compile": "none", "data_loader": "dataloader", "num_workers": 0},
                       {"compile": "none", "data_loader": "dataloader", "num_workers": 2}]
    assert p.configurations(spec, max_configs=3) == configs[:2]  # a slot kept for the combination


def test_each_configuration_is_timed_under_every_optimizer_and_precision_the_space_can_choose():
    """Other maths knobs stay at the baseline's value (lr 0.02, schedule constant: warmup_fraction inactive)."""
    spec = spec_from_dict(MATHS_SPACE, "x.yaml")
    assert p.maths_combinations(spec) == [
        {"lr": 0.02, "schedule": "constant", "warmup_fraction": 0.0, "optimizer": o, "precision": q}
        for o in ("sgd", "adamw") for q in ("fp32", "bf16")]
    assert p.maths_combinations(spec_from_dict(SPACE, "x.yaml")) == [{"lr": 0.05}]  # the baseline's (Recipe's)
    outside = spec_from_dict({**SPACE, "baseline": {"batch_size": 32, "lr": 0.5}}, "x.yaml")
    assert p.maths_combinations(outside) == [{"lr": 0.01}]  # not offered: the range's first end


@pytest.mark.parametrize("gain,winner", [(1.02, "default"), (1.20, "foreach")])
def test_a_gain_inside_the_timing_noise_keeps_the_default_and_one_beyond_it_wins(gain, winner):
    """The base's rounds differ by 5% (the machine's noise): 2% faster is within it, 20% is not."""
    spec = spec_from_dict(MATHS_SPACE, "x.yaml")
    base, foreach = {"optimizer_impl": "default"}, {"optimizer_impl": "foreach"}
    rounds = (1.0, 1.05, 1.02)
    probes = (measured(base, {32: 100.0, 64: 180.0}, rounds=rounds, maths=(SGD, ADAMW))
              + measured(foreach, {32: 100.0 * gain, 64: 180.0 * gain}, rounds=rounds, maths=(SGD, ADAMW)))
    fixed, challenger, verdict = p.fastest([base, foreach], probes, spec.budget.max_train_seconds)
    assert fixed == {"optimizer_impl": winner} and challenger == foreach
    assert verdict.speed == pytest.approx(gain) and verdict.noise == pytest.approx(0.05)
    decision = p.Decision(fixed, None, spec, probes, base, challenger, verdict)
    if winner == "default":
        assert decision.describe() == ("probe fixed: optimizer_impl=default (kept default: optimizer_impl=foreach "
                                       "1.02x within noise 5.0%)")
        assert decision.speedup == 1.0
    else:
        assert decision.describe() == ("probe fixed: optimizer_impl=foreach (1.20x the default, faster by 20.0% > "
                                       "noise 5.0%)")
        assert decision.speedup == pytest.approx(1.2)


def test_speed_is_the_geometric_mean_over_maths_so_a_gain_under_one_precision_alone_does_not_win():
    """30% faster in fp32 but 30% slower in bf16 (noise-free rounds): slower overall, the default stays."""
    base, fused = {"optimizer_impl": "default"}, {"optimizer_impl": "fused"}
    fp32, bf16 = {"precision": "fp32"}, {"precision": "bf16"}
    probes = (measured(base, {32: 100.0}, maths=(fp32, bf16))
              + measured(fused, {32: 130.0}, maths=(fp32,)) + measured(fused, {32: 70.0}, maths=(bf16,)))
    fixed, _, verdict = p.fastest([base, fused], probes, 30.0)
    assert fixed == base and verdict.speed == pytest.approx((1.3 * 0.7) ** 0.5) and verdict.noise == 0.0


def test_rounds_are_compared_pairwise_so_a_machine_slowing_down_moves_no_ratio():
    """Round 2 runs at half speed for everyone; the challenger is 10% faster in each round."""
    base, fast = {"compile": "none"}, {"compile": "none", "channels_last": True}
    probes = measured(base, {32: 100.0}, rounds=(1.0, 0.5)) + measured(fast, {32: 110.0}, rounds=(1.0, 0.5))
    _, _, verdict = p.fastest([base, fast], probes, 30.0)
    assert verdict.speed == pytest.approx(1.1) and verdict.noise == pytest.approx(1.0)  # the base's 2x spread


def test_noise_in_single_timings_counts_even_where_the_rounds_average_out():
    """The base timed at half speed once in each cell, in a different round for each: every round's mean is
    the same, yet one timing in two was off by 2x. An equal challenger must not win on that."""
    base, same = {"optimizer_impl": "default"}, {"optimizer_impl": "foreach"}
    probes = [p.Probe(base, 32, p.OK, 50.0, 0.0, round=0), p.Probe(base, 32, p.OK, 100.0, 0.0, round=1),
              p.Probe(base, 64, p.OK, 100.0, 0.0, round=0), p.Probe(base, 64, p.OK, 50.0, 0.0, round=1),
              *measured(same, {32: 100.0, 64: 100.0})]
    fixed, _, verdict = p.fastest([base, same], probes, 30.0)
    assert verdict.speed == pytest.approx(2 ** 0.5) and verdict.noise == pytest.approx(1.0) and fixed == base


@pytest.mark.parametrize("compile_seconds,winner", [(5.0, "default"), (20.0, "none")])
def test_a_compile_mode_wins_only_when_its_compile_seconds_are_repaid_within_the_budget(compile_seconds, winner):
    """Twice the speed saves half of a 30 s budget: 15 s. Compiling in 5 s pays; in 20 s it does not."""
    spec = spec_from_dict(SPACE, "x.yaml")
    base, compiled = {"compile": "none"}, {"compile": "default"}
    probes = measured(base, {32: 100.0, 64: 200.0}) + measured(compiled, {32: 200.0, 64: 400.0}, compile_seconds)
    assert p.fastest([base, compiled], probes, spec.budget.max_train_seconds)[0]["compile"] == winner


@pytest.mark.parametrize("production_seconds,winner", [(None, "none"), (600, "default")])
def test_the_probe_weighs_a_compile_against_the_production_budget(production_seconds, winner):
    """A compile of 20 s at twice the speed: not repaid in a 30 s trial (saves 15 s), repaid in the 600 s production
    run a long job confirms and exports (confirm.max_train_seconds: saves 300 s)."""
    import io

    confirm = {"confirm": {"max_train_seconds": production_seconds}} if production_seconds else {}
    spec = spec_from_dict({**SPACE, **confirm, "probe": {"rounds": 2},
                           "space": {"compile": {"choice": ["none", "default"]}, "lr": {"loguniform": [0.01, 0.1]}}},
                          "x.yaml")

    def measure(config: dict, round_: int) -> list[p.Probe]:
        compiled = config["compile"] != "none"
        return [p.Probe(config, b, p.OK, 100.0 * b * (2 if compiled else 1), 20.0 if compiled else 0.0,
                        round=round_) for b in p.batch_sizes(spec)]

    assert p.probe_stage(spec, measure, io.StringIO()).fixed["compile"] == winner


def test_a_configuration_that_runs_out_of_memory_under_any_maths_where_the_baseline_fits_never_wins():
    base, wide = {"compile": "none"}, {"compile": "default"}
    probes = (measured(base, {32: 100.0, 64: 100.0}, maths=(SGD, ADAMW)) + measured(wide, {32: 900.0, 64: 900.0},
                                                                                     maths=(SGD,))
              + measured(wide, {32: 900.0, 64: None}, maths=(ADAMW,)))
    assert p.fastest([base, wide], probes, 30.0) == (base, None, None)


def test_the_stage_times_every_configuration_in_interleaved_rounds_and_states_its_margin():
    """probe_stage with a measure of given timings (no training): the order rotates each round, so no
    configuration always runs first; each configuration and maths gets a line, the decision its margin."""
    import io

    spec = spec_from_dict({**MATHS_SPACE, "probe": {"rounds": 3}}, "x.yaml")
    calls = []

    def measure(config: dict, round_: int) -> list[p.Probe]:
        calls.append((config["optimizer_impl"], round_))
        speed = {"default": 100.0, "foreach": 150.0}[config["optimizer_impl"]]
        return [p.Probe(config, b, p.OK, speed * b * (1 + round_ / 100), 0.0, maths=m, round=round_)
                for m in p.maths_combinations(spec) for b in p.batch_sizes(spec)]

    out = io.StringIO()
    decision = p.probe_stage(spec, measure, out)
    assert calls == [("default", 0), ("foreach", 0), ("foreach", 1), ("default", 1), ("default", 2), ("foreach", 2)]
    assert len(decision.probes) == 2 * 4 * 2 * 3  # configurations x maths x batch sizes x rounds
    lines = out.getvalue().splitlines()
    assert "  probe 1: optimizer_impl=foreach [optimizer=adamw precision=bf16]: batch 32 4,848 samples/s; " \
           "batch 64 9,696 samples/s" in lines
    assert lines[-1] == "probe fixed: optimizer_impl=foreach (1.50x the default, faster by 50.0% > noise 2.0%)"
    assert decision.spec.space["optimizer_impl"].choice == ["foreach"]


def test_the_combination_of_winners_is_timed_against_the_default_in_rounds_of_its_own():
    spec = spec_from_dict({**SPACE, "probe": {"rounds": 2}, "baseline": {"batch_size": 32},
                           "space": {"channels_last": {"choice": [False, True]},
                                     "optimizer_impl": {"choice": ["default", "foreach"]}}}, "x.yaml")
    speeds = {(False, "default"): 100.0, (True, "default"): 130.0, (False, "foreach"): 120.0, (True, "foreach"): 160.0}
    calls = []

    def measure(config: dict, round_: int) -> list[p.Probe]:
        calls.append((config["channels_last"], config["optimizer_impl"], round_))
        return [p.Probe(config, 128, p.OK, speeds[config["channels_last"], config["optimizer_impl"]], 0.0,
                        round=round_)]

    import io

    decision = p.probe_stage(spec, measure, io.StringIO())
    assert calls[6:] == [(False, "default", 2), (True, "foreach", 2), (True, "foreach", 3), (False, "default", 3)]
    assert decision.fixed == {"channels_last": True, "optimizer_impl": "foreach"}
    assert decision.speedup == pytest.approx(1.6) and decision.verdict.noise == 0.0


def test_the_probed_recipes_train_with_the_spaces_optimizers_and_precisions(dataset_cache):
    """probe_config itself, in this process, on digits: what the trainer applied in each probe is the maths
    it was meant to time."""
    from autospeed.space import SearchSpec

    data = {**MATHS_SPACE, "probe": {"warmup_steps": 0, "steps": 1},
            "space": {**MATHS_SPACE["space"], "batch_size": {"choice": [32]}}}
    spec: SearchSpec = spec_from_dict(data, "x.yaml")
    found = [p.Probe(**d) for d in p.probe_config(spec.model_dump_json(), {"optimizer_impl": "foreach"}, 1, 2)]
    assert [(d.status, d.round, d.maths["optimizer"], d.maths["precision"]) for d in found] == [
        ("ok", 2, o, q) for o in ("sgd", "adamw") for q in ("fp32", "bf16")]
    assert [d.applied for d in found] == [{"optimizer_impl": "foreach", "optimizer": o, "precision": q}
                                          for o in ("sgd", "adamw") for q in ("fp32", "bf16")]


def test_batch_sizes_that_do_not_fit_get_the_largest_fitting_micro_batch_dividing_them():
    spec = spec_from_dict(SPACE, "x.yaml")
    fits_64 = p.by_batch(p.timings(measured({}, {32: 1.0, 64: 1.0, 256: None}, maths=(SGD, ADAMW)))[p._key({})])
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
    from autospeed.search.session import SearchSession
    from autospeed.search.storage import SearchDir

    spec = spec_from_dict(SPACE, "x.yaml")
    decided = p.narrowed(spec, {"compile": "default", "data_loader": "device"}, 64)
    folder = SearchDir(tmp_path)
    folder.write_state({"search_id": "s1", PROBED_SPACE: decided.model_dump(mode="json")["space"]})

    # no MLflow client and no Ray: a second probe would fail here
    session = SearchSession(client=None, parent_id="parent", experiment_id="0", search_id="s1", search_dir=folder,
                            outbox=None, console=None)
    again = _probed(spec, session, {"cpu": 1, "gpu": 0}, 1)

    assert again.space == decided.space and again.space["compile"].choice == ["default"]


def test_a_compile_pays_for_itself_only_on_its_cold_first_round_compile():
    """The first round compiles from inductor's empty cache (20 s), later rounds hit what it left (2 s). Twice
    the speed saves 15 s of a 30 s budget: the 20 s a new machine pays is not repaid, though the median (2 s)
    and the mean (8 s) over rounds would be. The summary's compile seconds are the cold ones too."""
    base, compiled = {"compile": "none"}, {"compile": "default"}
    probes = measured(base, {32: 100.0}, rounds=(1.0, 1.0, 1.0)) + [
        p.Probe(compiled, 32, p.OK, 200.0, seconds, round=r) for r, seconds in enumerate((20.0, 2.0, 2.0))]
    cells = p.timings(probes)[p._key(compiled)]

    assert not p.repaid(compiled, cells, 2.0, 30.0)
    assert p.repaid(compiled, cells, 2.0, 45.0)  # saves 22.5 s: the cold 20 s is repaid
    assert p.fastest([base, compiled], probes, 30.0)[0] == base
    assert [q.compile_seconds for q in p.summary(cells)] == [20.0]


def test_a_compile_modes_first_probe_round_compiles_from_an_empty_inductor_cache(monkeypatch, tmp_path):
    """Round 0 (and the combination's first round, `rounds`) of a compiled configuration trains with a new
    empty inductor folder, whatever an earlier search left in the machine's; later rounds and eager
    configurations keep the machine's; the folder is gone and the environment restored after."""
    import os

    from autospeed.train import trainer

    shared = tmp_path / "shared"
    (shared / "fxgraph").mkdir(parents=True)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(shared))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    seen = []

    def fake_train(recipe, workload, on_eval=None, num_threads=None):
        folder = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        seen.append((recipe.compile, folder, sorted(os.listdir(folder)), os.environ.get("TRITON_CACHE_DIR")))
        raise RuntimeError("not trained")

    monkeypatch.setattr(trainer, "train", fake_train)
    monkeypatch.setattr(p, "_WARM", [True])  # no untimed warm-up probe
    spec = spec_from_dict({"name": "x", "workload": "digits", "target_accuracy": 0.9,
                           "budget": {"trials": 1, "max_train_seconds": 30},
                           "probe": {"rounds": 3}, "space": {"batch_size": {"choice": [32]},
                                                              "compile": {"choice": ["none", "default"]}}},
                          "x.yaml").model_dump_json()

    def folder_in(config, round_):
        seen.clear()
        with pytest.raises(RuntimeError, match="not trained"):
            p.probe_config(spec, config, 1, round_)
        (compile_mode, folder, held, triton), = seen
        assert compile_mode == config["compile"]
        return folder, held, triton

    for first in (0, 3):
        folder, held, triton = folder_in({"compile": "default"}, first)
        assert folder != str(shared) and held == [] and triton == os.path.join(folder, "triton")
        assert not os.path.exists(folder)
    assert folder_in({"compile": "default"}, 1)[:2] == (str(shared), ["fxgraph"])
    assert folder_in({"compile": "none"}, 0)[:2] == (str(shared), ["fxgraph"])
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(shared) and "TRITON_CACHE_DIR" not in os.environ
