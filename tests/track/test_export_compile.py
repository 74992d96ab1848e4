"""Which compile cost a confirmed speed-up includes (docs/design.md "Compile cost as production pays it"): the
confirmation tags the parent with `confirm.compile_cache` (cold by default), and `autospeed export` writes it as
`measured.compile_cache_state` and says it in the header of a compiled recipe. No training: the search and its
confirmation outcome are written into a fresh MLflow store through confirmation's own logging."""

from __future__ import annotations

import pytest
import yaml
from mlflow.tracking import MlflowClient

from autospeed.outcome import Status
from autospeed.recipe import Recipe, load_recipe
from autospeed.search.confirm import _log_parent
from autospeed.search.confirm_stats import Candidate, decide
from autospeed.track import names, writers
from autospeed.track.export import best_recipe_yaml, compile_lines

CONFIRM_RUNS = [(1.2, 2.0), (1.5, 2.1), (1.1, 1.9)]  # the winner's (compile seconds, TTA) in its confirmation
COMPILED = Recipe(workload="digits", target_accuracy=0.9, max_train_seconds=30, lr=0.1, compile="default")
BASE = Recipe(workload="digits", target_accuracy=0.9, max_train_seconds=30, lr=0.01)


def make_confirmed_search(client, winner: Recipe, compile_cache: str | None,
                          ways: dict[str, list[tuple[float, float | None]]] | None = None,
                          baseline_runs: list[tuple[float, float | None]] = ()) -> None:
    """A finished search (a baseline and one trial) whose confirmation ran with `compile_cache` (None: a search
    confirmed before the setting existed, whose parent has no tag); `ways`: the winner's compile_way runs after it
    (search/compile_ways.py), (compile seconds, TTA or None for a missed target) per way; `baseline_runs`: the
    baseline's confirmation runs, alike."""
    exp = client.create_experiment("cc")
    parent = client.create_run(exp, tags={names.TAG_KIND: names.KIND_SEARCH, names.TAG_SEARCH_ID: "s1"})
    for trial_id, recipe, baseline in (("base", BASE, True), ("t1", winner, False)):
        run = client.create_run(exp, tags={names.TAG_PARENT: parent.info.run_id, names.TAG_KIND: names.KIND_TRIAL,
                                           names.TAG_TRIAL_ID: trial_id, names.TAG_BASELINE: str(baseline).lower(),
                                           names.TAG_STATUS: Status.REACHED.value,
                                           names.TAG_TTA_SOURCE: names.TTA_MEASURED})
        writers.log_batch(client, run.info.run_id, writers.metrics({names.M_OBJECTIVE: 2.0, names.M_TTA: 2.0}))
        client.log_text(run.info.run_id, recipe.to_yaml(), "recipe.yaml")
        client.set_terminated(run.info.run_id)

    def log_runs(kind: str, trial_id: str, runs, tags: dict[str, str]) -> None:
        for repeat, (compile_seconds, tta) in enumerate(runs):  # as confirmation logs them
            run = client.create_run(exp, tags={
                names.TAG_PARENT: parent.info.run_id, names.TAG_KIND: kind, names.TAG_TRIAL_ID: trial_id,
                names.TAG_CONFIRM_REPEAT: str(repeat), names.TAG_CONFIRM_TRIALS: "2", **tags,
                names.TAG_STATUS: (Status.REACHED if tta else Status.NOT_REACHED).value})
            writers.log_batch(client, run.info.run_id, writers.metrics({names.M_COMPILE_SECONDS: compile_seconds,
                                                                      **({names.M_TTA: tta} if tta else {})}))
            client.set_terminated(run.info.run_id)

    log_runs(names.KIND_CONFIRM, "t1", CONFIRM_RUNS, {})
    log_runs(names.KIND_CONFIRM, "base", baseline_runs, {})
    for way, runs in (ways or {}).items():
        log_runs(names.KIND_COMPILE_WAY, "t1", runs, {names.TAG_COMPILE_WAY: way})
    winner_c = Candidate("t1", False, 2.0, winner, ttas=[2.0, 2.1, 1.9])
    base_c = Candidate("base", True, 8.0, BASE, ttas=[8.0, 8.2, 7.9])
    outcome = decide([winner_c, base_c], 3)
    if compile_cache is not None:
        outcome.compile_cache = compile_cache
    _log_parent(client, parent.info.run_id, outcome, 2)
    if compile_cache is None:
        client.delete_tag(parent.info.run_id, names.TAG_CONFIRM_COMPILE_CACHE)


@pytest.fixture
def client(tmp_path, new_store) -> MlflowClient:
    return MlflowClient(new_store(tmp_path / "store"))


@pytest.mark.parametrize("state", ["cold", "warm"])
def test_the_export_says_which_compile_the_confirmed_speedup_includes(client, state):
    make_confirmed_search(client, COMPILED, state)

    parent = client.search_runs([client.get_experiment_by_name("cc").experiment_id],
                                filter_string=f"tags.`{names.TAG_KIND}` = '{names.KIND_SEARCH}'")[0]
    assert parent.data.tags[names.TAG_CONFIRM_COMPILE_CACHE] == state
    text, best = best_recipe_yaml(client, "cc")
    assert best.trial_id == "t1"
    assert yaml.safe_load(text)["measured"]["compile_cache_state"] == state
    header = [line for line in text.splitlines() if line.startswith("# compile:")]
    assert header == [header[0]] and f"compile: {state}" in header[0].lower()
    assert ("empty inductor cache" in header[0]) == (state == "cold")


def test_a_search_confirmed_before_the_setting_existed_exports_as_warm(client):
    """Before confirm.compile_cache, every confirmation run compiled from the machine's shared folder."""
    make_confirmed_search(client, COMPILED, None)
    text, _ = best_recipe_yaml(client, "cc")
    assert yaml.safe_load(text)["measured"]["compile_cache_state"] == "warm"
    assert "# compile: WARM" in text


def test_an_eager_winner_says_its_state_but_no_compile_line(client):
    make_confirmed_search(client, BASE.model_copy(update={"lr": 0.1}), "cold")
    text, _ = best_recipe_yaml(client, "cc")
    assert yaml.safe_load(text)["measured"]["compile_cache_state"] == "cold"
    assert "# compile:" not in text


@pytest.mark.parametrize("state, way", [("cold", "new_machine"), ("warm", "same_machine_warm")])
def test_the_export_gives_the_compile_three_ways_and_which_the_speedup_includes(client, state, way, tmp_path):
    """The way the confirmation trained is measured, from its runs (medians: compile 1.2 s, TTA 2.0 s over 3
    runs); the two others are "not measured", never guessed; the printed lines mark the one the speed-up uses."""
    make_confirmed_search(client, COMPILED, state)
    text, _ = best_recipe_yaml(client, "cc")
    costs = yaml.safe_load(text)["measured"]["compile_costs"]
    measured = costs.pop(way)
    assert (measured["compile_seconds_median"], measured["tta_seconds_median"], measured["runs"]) == (1.2, 2.0, 3)
    assert costs == dict.fromkeys(costs, "not measured") and len(costs) == 2
    (tmp_path / "best.yaml").write_text(text)
    lines = compile_lines(load_recipe(tmp_path / "best.yaml").measured)  # what `autospeed export` prints
    marked = [line for line in lines if "<- the speed-up includes this" in line]
    assert len(lines) == 4 and len(marked) == 1 and "compile (first step) 1.20 s [next run" in marked[0]
    assert "TTA 2.00 s [next run" in marked[0] and "(3 runs)" in marked[0]
    assert sum("not measured" in line for line in lines) == 2


def test_the_compile_way_runs_after_confirmation_fill_the_other_two_ways_each_with_its_next_run_interval(client,
                                                                                                      tmp_path):
    """Confirmed cold (new_machine: compile 1.2 s, TTA 2.0 s), then the winner with its shipped cache and warm
    (search/compile_ways.py): each way its own medians and where one more run falls, 90% (each way's centre, the
    spread pooled: test_the_next_run_interval_pools_the_spread_of_every_group_of_the_confirmation); a way with a
    missed target has a median but no TTA interval."""
    shipped = [(0.9, 1.7), (1.0, 1.8), (0.8, 1.6)]
    warm = [(0.1, 0.9), (0.2, 1.0), (0.1, None)]
    make_confirmed_search(client, COMPILED, "cold", {"new_machine_shipped_cache": shipped, "same_machine_warm": warm})
    text, _ = best_recipe_yaml(client, "cc")
    (tmp_path / "best.yaml").write_text(text)
    costs = load_recipe(tmp_path / "best.yaml").measured.compile_costs
    cold, ship, hot = costs["new_machine"], costs["new_machine_shipped_cache"], costs["same_machine_warm"]
    assert (cold.compile_seconds_median, cold.tta_seconds_median, cold.runs) == (1.2, 2.0, 3)
    assert (ship.compile_seconds_median, ship.tta_seconds_median, ship.runs) == (0.9, 1.7, 3)
    assert (hot.compile_seconds_median, hot.tta_seconds_median, hot.runs) == (0.1, 1.0, 3)
    for cost, runs in ((cold, CONFIRM_RUNS), (ship, shipped), (hot, warm)):
        assert cost.compile_seconds_low < min(c for c, _ in runs) <= max(c for c, _ in runs) < cost.compile_seconds_high
    assert ship.tta_seconds_low < 1.6 and 1.8 < ship.tta_seconds_high
    assert hot.tta_seconds_low is None and hot.tta_seconds_high is None  # a missed target: its spread is unknown
    lines = compile_lines(load_recipe(tmp_path / "best.yaml").measured)
    assert "not measured" not in "".join(lines)
    assert [("[next run" in line, "<- the speed-up" in line) for line in lines[1:]] == [(True, True), (True, False),
                                                                                         (True, False)]


def test_an_eager_winner_has_no_compile_costs(client):
    make_confirmed_search(client, BASE.model_copy(update={"lr": 0.1}), "cold")
    text, _ = best_recipe_yaml(client, "cc")
    assert "compile_costs" not in yaml.safe_load(text)["measured"]


def test_the_next_run_interval_pools_the_spread_of_every_group_of_the_confirmation(client, tmp_path):
    """The baseline's noisy confirmation runs (TTA 6.9-9.6 s) and the shipped cache's widen the new machine's TTA
    interval: one machine's noise, from every group of runs; compile seconds pool with compile seconds only (the
    eager baseline's 0 s are no compile), a way with a missed target adds nothing to the TTAs' pool; the drift
    between sessions is added to both (the user's run comes in another sitting)."""
    from autospeed.outcome import SESSION_LOG_SD, log_spread, next_run_interval

    base_runs, shipped = [(0.0, 8.0), (0.0, 9.6), (0.0, 6.9)], [(0.9, 1.7), (1.0, 1.8), (0.8, 1.6)]
    warm = [(0.1, 0.9), (0.2, 1.0), (0.1, None)]
    make_confirmed_search(client, COMPILED, "cold", {"new_machine_shipped_cache": shipped, "same_machine_warm": warm},
                          baseline_runs=base_runs)
    text, _ = best_recipe_yaml(client, "cc")
    (tmp_path / "best.yaml").write_text(text)
    cold = load_recipe(tmp_path / "best.yaml").measured.compile_costs["new_machine"]
    ttas, compiles = [t for _, t in CONFIRM_RUNS], [c for c, _ in CONFIRM_RUNS]
    pooled = next_run_interval(ttas, spread=log_spread([ttas, [t for _, t in base_runs], [t for _, t in shipped]]),
                               session_sd=SESSION_LOG_SD)
    assert (cold.tta_seconds_low, cold.tta_seconds_high) == pytest.approx(pooled)
    own_low, own_high = next_run_interval(ttas, session_sd=SESSION_LOG_SD)
    assert cold.tta_seconds_low < own_low and own_high < cold.tta_seconds_high
    by_kind = log_spread([compiles, [c for c, _ in shipped], [c for c, _ in warm]])
    assert (cold.compile_seconds_low, cold.compile_seconds_high) == pytest.approx(
        next_run_interval(compiles, spread=by_kind, session_sd=SESSION_LOG_SD))
    line = compile_lines(load_recipe(tmp_path / "best.yaml").measured)[1]
    assert f"TTA 2.00 s [next run {pooled[0]:.2f}-{pooled[1]:.2f} s]" in line
