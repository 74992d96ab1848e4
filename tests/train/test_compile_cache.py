"""The compile cache shipped with a recipe (docs/design.md "Compile cache shipped with a recipe"): a compiled
confirmation-style run (a fresh process) saves torch's cache artifacts; the search logs them on the winner's
trial run; `autospeed export` writes them beside best.yaml and names them in `measured`; `autospeed train` on a
new machine (an empty TORCHINDUCTOR_CACHE_DIR) loads them and finds every compiled graph there, by torch's own
counters. A recipe naming a missing or corrupt cache trains anyway, with one warning line.

Two full compiles in the file: the saving run, and the loading run on the new machine (on CPU a cache hit still
builds inductor's C++ kernels). The missing-cache run compiles on the saving run's machine, where inductor's
local cache is warm."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from autospeed.outcome import Status
from autospeed.recipe import Measured, Recipe
from autospeed.run_recipe import train_in_fresh_process
from autospeed.search.confirm import _log_compile_cache
from autospeed.search.confirm_stats import Candidate
from autospeed.track import names, writers
from autospeed.train import compile_cache

RECIPE = Recipe(workload="digits", target_accuracy=0.2,
                max_train_seconds=120, epochs=1, eval_every_epochs=1, batch_size=100, lr=0.05, compile="default")
HITS = re.compile(r"compile cache: (\d+) of (\d+) compiled graphs found in it")
WARM_HITS = re.compile(r"compile: (\d+) of (\d+) compiled graphs found in this machine's inductor cache .*")


@pytest.fixture(scope="module")
def search_machine(tmp_path_factory) -> tuple[Path, Path]:
    """(the search machine's inductor cache folder, the cache artifacts file) of one compiled run in a fresh
    process, as a confirmation run trains."""
    folder = tmp_path_factory.mktemp("search-machine")
    cache = folder / "saved" / "compile-cache.bin"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(folder / "inductor"))  # the spawned process inherits it
        # torch's default threads, as `autospeed train` runs: inductor's CPU graphs are keyed by the thread count
        result = train_in_fresh_process(RECIPE, None, compile_cache_to=str(cache), compile_cache="warm")
    assert result.applied["compile"] == "default" and result.error is None, result.error
    return folder / "inductor", cache


def make_search(client, recipe: Recipe) -> str:
    """A finished search whose one trial reached with `recipe`; returns the trial's run id."""
    exp = client.create_experiment("cc")
    parent = client.create_run(exp, tags={names.TAG_KIND: names.KIND_SEARCH, names.TAG_SEARCH_ID: "s1"})
    run = client.create_run(exp, tags={names.TAG_PARENT: parent.info.run_id, names.TAG_KIND: names.KIND_TRIAL,
                                       names.TAG_TRIAL_ID: "t1", names.TAG_BASELINE: "false",
                                       names.TAG_STATUS: Status.REACHED.value,
                                       names.TAG_TTA_SOURCE: names.TTA_MEASURED})
    writers.log_batch(client, run.info.run_id, writers.metrics({names.M_OBJECTIVE: 2.0, names.M_TTA: 2.0}))
    client.log_text(run.info.run_id, recipe.to_yaml(), "recipe.yaml")
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def train_cli(config: Path, inductor_dir: Path) -> subprocess.CompletedProcess:
    """`autospeed train --config CONFIG --json --no-track` in a fresh process with its own inductor cache folder."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_dir)}
    return subprocess.run([sys.executable, "-m", "autospeed", "train", "--config", str(config), "--json",
                           "--no-track"], cwd=config.parent, env=env, capture_output=True, text=True, timeout=300)


def test_export_ships_the_winners_cache_and_train_on_a_new_machine_finds_every_graph_in_it(
        search_machine, tmp_path, new_store, cli_in_process):
    _, saved = search_machine
    store = new_store(tmp_path / "store")
    client = MlflowClient(store)
    run_id = make_search(client, RECIPE)
    winner = Candidate("t1", False, 2.0, RECIPE, run_id=run_id)
    _log_compile_cache(client, winner, str(saved), io.StringIO())  # what confirmation does for its winner

    out = tmp_path / "export" / "best.yaml"
    proc = cli_in_process("export", "--name", "cc", "--tracking-uri", store, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    shipped = tmp_path / "export" / "best.compile-cache.bin"
    assert yaml.safe_load(out.read_text())["measured"]["compile_cache"] == "best.compile-cache.bin"
    assert shipped.read_bytes() == saved.read_bytes()
    assert f"wrote {shipped}" in proc.stdout

    new_machine = tmp_path / "new-machine-inductor"  # empty: nothing but the shipped file can hit
    trained = train_cli(out, new_machine)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert json.loads(trained.stdout)["compile_seconds"] > 0
    assert "compile cache: loaded" in trained.stderr
    hits, graphs = map(int, HITS.search(trained.stderr).groups())
    assert graphs > 0 and hits == graphs, trained.stderr[-2000:]


def test_a_recipe_whose_cache_file_is_missing_warns_once_and_trains_on_the_warm_local_cache(search_machine,
                                                                                          tmp_path):
    """On the search machine, whose inductor folder holds the recipe's graphs, a recipe whose cache file is
    missing trains with one warning, and every graph it compiles is found in the local, warm cache (the warm-hit
    path), which the run says: a new machine would compile them again."""
    inductor, _ = search_machine
    config = tmp_path / "best.yaml"
    named = Measured(compile_cache="best.compile-cache.bin")  # the file is not there
    config.write_text(RECIPE.model_copy(update={"measured": named}).to_yaml())
    trained = train_cli(config, inductor)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert json.loads(trained.stdout)["status"] in ("reached", "not_reached")
    warnings = [line for line in trained.stderr.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1 and "best.compile-cache.bin is missing" in warnings[0], trained.stderr[-2000:]
    assert "compiles from scratch" in warnings[0]
    warm = WARM_HITS.search(trained.stderr)
    assert warm is not None, trained.stderr[-2000:]
    hits, graphs = map(int, warm.groups())
    assert graphs > 0 and hits == graphs, warm.group(0)
    assert str(inductor) in warm.group(0) and "warm" in warm.group(0)


def test_a_corrupt_cache_file_is_refused_in_one_line(tmp_path, capfd):
    saved = tmp_path / "best.compile-cache.bin"
    saved.write_bytes(b"not torch's cache artifacts")
    with pytest.raises(compile_cache.CacheNotLoaded, match="not torch.compile cache artifacts"):
        compile_cache.load(saved)
    assert "Traceback" not in capfd.readouterr().err  # torch's own traceback is kept quiet


def test_export_of_a_winner_that_does_not_compile_ships_no_cache(tmp_path, new_store, cli_in_process):
    store = new_store(tmp_path / "store")
    client = MlflowClient(store)
    run_id = make_search(client, RECIPE.model_copy(update={"compile": "none"}))
    stray = tmp_path / "stray" / "compile-cache.bin"  # even a cache on its run: an eager recipe has nothing to load
    stray.parent.mkdir()
    stray.write_bytes(b"artifacts")
    client.log_artifact(run_id, str(stray))
    out = tmp_path / "best.yaml"
    proc = cli_in_process("export", "--name", "cc", "--tracking-uri", store, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "compile_cache" not in yaml.safe_load(out.read_text())["measured"]
    assert not (tmp_path / "best.compile-cache.bin").exists() and "cache" not in proc.stdout


def test_the_confirmed_winner_trains_with_its_shipped_cache_and_warm_once_each_and_a_resume_keeps_both(
        search_machine, tmp_path, new_store):
    """search/compile_ways.py after a cold confirmation of one round: one run with the cache the export ships and
    one warm, both real and compiled, logged as compile_way runs under their ways and counted in the confirmation's
    compute; a resumed search (a new ledger over the same store) keeps both and trains nothing."""
    from autospeed.search.compile_ways import measure_compile_ways
    from autospeed.search.confirm_ledger import RunLedger
    from autospeed.search.confirm_stats import ConfirmOutcome
    from autospeed.search.session import SearchSession
    from autospeed.search.storage import SearchDir
    from autospeed.space import spec_from_dict

    _, saved = search_machine
    client = MlflowClient(new_store(tmp_path / "store"))
    run_id = make_search(client, RECIPE)
    parent = client.get_run(client.get_run(run_id).data.tags[names.TAG_PARENT])
    spec = spec_from_dict({"name": "cc", "workload": "digits", "target_accuracy": 0.2,
                           "space": {"lr": {"choice": [0.05]}}}, "space.yaml")
    winner = Candidate("t1", False, 2.0, RECIPE, run_id=run_id)
    outcome = ConfirmOutcome([winner], 1, winner, None)  # confirmed cold, in rounds: the defaults

    def ledger() -> RunLedger:  # a new one reads what the store holds, as a resumed search's does
        return RunLedger(SearchSession.direct(client, parent, "s1", SearchDir(tmp_path), io.StringIO()), 1)

    said = io.StringIO()
    ways = measure_compile_ways(ledger(), outcome, spec, str(saved), said)
    assert sorted(ways) == ["new_machine_shipped_cache", "same_machine_warm"], said.getvalue()
    for c in ways.values():
        assert len(c.train_seconds) == 1 and c.ttas[0] is not None, said.getvalue()
    runs = client.search_runs([parent.info.experiment_id],
                              filter_string=f"tags.`{names.TAG_KIND}` = '{names.KIND_COMPILE_WAY}'")
    assert sorted(r.data.tags[names.TAG_COMPILE_WAY] for r in runs) == sorted(ways)
    assert all(r.data.metrics[names.M_COMPILE_SECONDS] > 0 and r.info.status == "FINISHED" for r in runs)
    assert outcome.compile_ways == ways  # their train clock is in the confirmation's compute, on the parent too
    spent = sum(r.data.metrics[names.M_TRAIN_SECONDS] for r in runs)
    assert client.get_run(parent.info.run_id).data.metrics[names.M_CONFIRM_COMPUTE_SECONDS] == pytest.approx(spent)

    again = io.StringIO()
    kept = measure_compile_ways(ledger(), outcome, spec, str(saved), again)
    assert again.getvalue().count("(finished before the resume: kept)") == 2, again.getvalue()
    assert [c.ttas for c in kept.values()] == [c.ttas for c in ways.values()]
