"""A real `mlflow server` on loopback that goes away in the middle of a search, for longer than MLflow's client
retries (MLFLOW_HTTP_REQUEST_MAX_RETRIES=0, MLflow's own setting, as cli_env gives every test), and comes back
on the same port (docs/design.md "Crash anywhere, lose nothing").

1. Silent past `tracking.grace_seconds`: the search stops as interrupted (exit 130) with the command that
   resumes it, and loses nothing.
2. Resumed with a longer grace, the server goes away again while a trial trains: trials go on and finish
   during the outage, their writes kept on disk; once the server is back every write arrives, in order, and
   no evaluation the trainer reported is missing from MLflow.
3. The same search's confirmation: the server goes away a third time while the first confirmation run
   trains; confirmation trains on, its writes kept in the search's journal, and once the server is back the
   search ends 0 with every confirmation run recorded and the best recipe exported.
Each state is established before the next step (a gated run held mid-training, the server's process gone,
ledger entries written, the search saying it waits for the store), never waited for by the clock. (One search
for the three: each search and each server start costs a Python and a Ray start-up.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Gate, cli_env, client_for, error_lines, search_runs, wait_until, write_space

pytestmark = pytest.mark.timeout(1200)

NAME = "outage"
TRIALS = 2
# Confirmation: the best recipe and the baseline twice each (4 runs, model builds 4 to 7). The search says the
# store stopped answering between two runs, once a write has failed; with 2 runs its only look comes right after
# the first run's writes, before the journal's sender may have tried them, and the line can be missing.
REPEATS = 2
CONFIRM_SEEDS_FROM = 1000  # confirm_sample.py SEED_OFFSET: a confirmation run's seed is its recipe's + 1000 + round


def _space(d: Path, gate: Gate, grace_seconds: float) -> Path:
    return write_space(d, {
        "name": NAME, **gate.workload(), "target_accuracy": 0.9,
        "budget": {"trials": TRIALS, "max_train_seconds": 600}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": 1, "repeats": REPEATS},
        "probe": {"enabled": False}, "tracking": {"grace_seconds": grace_seconds},
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 1000, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.01, 0.3]}, "batch_size": {"choice": [32, 64]}},
    })


def _ledger(d: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in (d / "store" / NAME).glob("*/finished/*.json")]


def test_a_tracking_server_gone_past_the_grace_stops_the_search_and_one_gone_within_it_loses_nothing(
        tmp_path, server, start_cli):
    """Every model build has a gate (conftest.GATED_PLUGIN): build 1 is the first session's baseline, 2 and 3
    the resumed session's trials (the baseline again, then the sampled trial), 4 to 7 its confirmation runs."""
    d = tmp_path
    gate = Gate(d)
    env = cli_env({"MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}, pythonpath=gate.plugin_dir)
    args = ["search", "--space", str(d / "space.yaml"), "--tracking-uri", server.uri, "--storage-path",
            str(d / "store"), "--resume"]

    # 1. Gone past a short grace, while build 1 (the baseline) trains: stopped as interrupted, resumable.
    _space(d, gate, grace_seconds=1)
    first = start_cli(*args, cwd=d, env=env)
    gate.wait_for(1, first)
    server.stop()
    assert first.wait(300) == 130, first.stdout + first.stderr
    lines = error_lines(first.stderr)
    assert len(lines) == 1 and "the tracking store has not answered for" in lines[0], first.stderr
    assert "tracking.grace_seconds" in lines[0] and "tracking_outbox.jsonl" in lines[0]
    assert "--resume" in first.stderr.splitlines()[-1]  # the command that resumes it
    assert "tracking: the store stopped answering" in first.stdout

    # 2. Resumed with a longer grace; the server goes away again while build 2 (the baseline again) trains.
    server.start()
    _space(d, gate, grace_seconds=600)
    second = start_cli(*args, cwd=d, env=env)
    gate.wait_for(2, second)
    server.stop()
    gate.open(2, TRIALS + 1)  # every trial may now reach the target: all of them finish while the server is away
    wait_until(lambda: len(_ledger(d)) == TRIALS or second.proc.poll() is not None, every=0.2,
               what="every trial finished during the outage")
    assert second.proc.poll() is None, second.stdout + second.stderr  # waiting for the server, not ended
    assert len(_ledger(d)) == TRIALS
    server.start()

    # 3. Confirmation: gone again while its first run (build 4) trains; every run finishes during the outage.
    gate.wait_for(TRIALS + 2, second)
    assert "tracking: the store answers again after" in second.stdout  # the trials' writes all arrived
    trials_said = len(second.stdout)
    server.stop()
    gate.open()  # every confirmation run may now reach the target: all of them train while the server is away
    wait_until(lambda: "tracking: waiting up to" in second.stdout or second.proc.poll() is not None, every=0.2,
               what="every confirmation run finished during the outage, the search waiting for the store")
    assert second.proc.poll() is None, second.stdout + second.stderr  # waiting for the server, not ended
    out = second.stdout[trials_said:]
    assert f"[{2 * REPEATS}/{2 * REPEATS}] confirm" in out, out
    assert "tracking: the store stopped answering" in out and "confirmation goes on" in out, out
    server.start()
    assert second.wait(300) == 0, second.stdout + second.stderr
    assert "tracking: the store answers again after" in second.stdout[trials_said:]

    parents, trials = search_runs(server.uri, NAME)
    assert len(parents) == 1 and len(trials) == TRIALS
    assert all(t.info.status == "FINISHED" for t in trials), [t.info.status for t in trials]
    client = client_for(server.uri)
    ledger = {p.stem: json.loads(p.read_text()) for p in (d / "store" / NAME).glob("*/finished/*.json")}
    for t in trials:  # every evaluation the trainer reported (the ledger keeps them), in MLflow
        reported = [round(s, 6) for s, _ in ledger[t.data.tags["autospeed.trial_id"]]["history"]]
        logged = [round(m.value, 6) for m in sorted(client.get_metric_history(t.info.run_id, "train_seconds"),
                                                    key=lambda m: m.step)]
        # the ledger's last report is the final one (not an evaluation); a run an earlier session began holds
        # that session's evaluations too
        assert reported[:-1] and set(reported[:-1]) <= set(logged), (logged, reported)
        assert t.data.metrics["tta_seconds"] > 0

    (parent,) = parents
    confirm = client.search_runs([parent.info.experiment_id], max_results=100,
                                 filter_string="tags.`autospeed.kind` = 'confirm'")
    assert len(confirm) == 2 * REPEATS, [r.info.status for r in confirm]
    assert all(r.info.status == "FINISHED" and r.data.metrics["tta_seconds"] > 0 for r in confirm)
    assert {r.data.params["seed"] for r in confirm} >= {str(CONFIRM_SEEDS_FROM), str(CONFIRM_SEEDS_FROM + 1)}
    assert parent.data.metrics["confirm_repeats"] == REPEATS and "autospeed.confirmed_best_trial" in parent.data.tags
    assert (next((d / "store" / NAME).glob("*/best.yaml"))).exists()  # exported from the store once it was back
