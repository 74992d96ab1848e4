"""A real `mlflow server` on loopback that goes away during confirmation, for longer than MLflow's client retries
(MLFLOW_HTTP_REQUEST_MAX_RETRIES=0, as cli_env gives every test), and comes back on the same port: confirmation
trains on, its writes kept in the search's journal, and once the server is back the search ends 0 with every
confirmation run recorded (docs/design.md "Crash anywhere, lose nothing"; issue 40).

Each state is established before the next step: the first confirmation run held at its gate (the trials' builds
are open: only seeds >= 1000, confirmation's, have a gate), the server's process gone, every confirmation run
finished and the search waiting for the store, as it says; never waited for by the clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Gate, cli_env, client_for, search_runs, wait_until, write_space

pytestmark = pytest.mark.timeout(1200)

NAME = "confirm_outage"
TOP_K, REPEATS = 1, 1  # the best recipe and the baseline, 1 round: 2 confirmation runs, each a fresh process
CONFIRM_SEEDS_FROM = 1000  # search/confirm.py SEED_OFFSET: a confirmation run's seed is its recipe's + 1000 + round


def _space(d: Path, gate: Gate) -> Path:
    return write_space(d, {
        "name": NAME, **gate.workload(gate_from_seed=CONFIRM_SEEDS_FROM), "target_accuracy": 0.9,
        "budget": {"trials": 2, "max_train_seconds": 600}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": TOP_K, "repeats": REPEATS},
        "probe": {"enabled": False}, "tracking": {"grace_seconds": 600},
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 1000, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.01, 0.3]}, "batch_size": {"choice": [32, 64]}},
    })


def _confirmation_held(gate: Gate) -> bool:
    """A confirmation run (seed >= 1000) is held at its gate: in the middle of training."""
    log = gate.dir / "waiting.log"
    return log.exists() and any(int(line.split()[2]) >= CONFIRM_SEEDS_FROM for line in log.read_text().splitlines())


def test_a_tracking_server_gone_during_confirmation_loses_no_confirmation_run(tmp_path, server, start_cli):
    d = tmp_path
    gate = Gate(d)
    _space(d, gate)
    env = cli_env({"MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}, pythonpath=gate.plugin_dir)
    search = start_cli("search", "--space", str(d / "space.yaml"), "--tracking-uri", server.uri, "--storage-path",
                       str(d / "store"), cwd=d, env=env)
    wait_until(lambda: _confirmation_held(gate) or search.proc.poll() is not None, every=0.2,
               what="the first confirmation run held at its gate")
    assert search.proc.poll() is None, search.stdout + search.stderr
    server.stop()
    gate.open()  # every confirmation run may now reach the target: all of them train while the server is away
    wait_until(lambda: "tracking: waiting up to" in search.stdout or search.proc.poll() is not None, every=0.2,
               what="every confirmation run finished during the outage, the search waiting for the store")
    assert search.proc.poll() is None, search.stdout + search.stderr  # waiting for the server, not ended
    out = search.stdout
    assert f"[{(TOP_K + 1) * REPEATS}/{(TOP_K + 1) * REPEATS}] confirm" in out, out
    assert "tracking: the store stopped answering" in out and "confirmation goes on" in out, out
    server.start()
    assert search.wait(300) == 0, search.stdout + search.stderr
    assert "tracking: the store answers again after" in search.stdout

    (parent,), trials = search_runs(server.uri, NAME)
    client = client_for(server.uri)
    confirm = client.search_runs([parent.info.experiment_id], max_results=100,
                                 filter_string="tags.`autospeed.kind` = 'confirm'")
    assert len(confirm) == (TOP_K + 1) * REPEATS, [r.info.status for r in confirm]
    assert all(r.info.status == "FINISHED" and r.data.metrics["tta_seconds"] > 0 for r in confirm)
    assert all(int(r.data.params["seed"]) >= CONFIRM_SEEDS_FROM for r in confirm)  # confirmation's own runs
    assert parent.data.metrics["confirm_repeats"] == REPEATS and "autospeed.confirmed_best_trial" in parent.data.tags
    assert (next((d / "store" / NAME).glob("*/best.yaml"))).exists()  # exported from the store once it was back
