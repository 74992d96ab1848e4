"""The tracking store (track/store.py): connecting to a store, its SQLite races, credentials hidden."""

from __future__ import annotations

import alembic.util
import mlflow.store.db.utils as db_utils
import pytest

from autospeed.errors import RunFailure
from autospeed.track.store import connect, experiment_id, redact


def test_a_store_migrated_by_another_process_at_the_same_moment_is_retried_not_unreachable(tmp_path, monkeypatch):
    """`mlflow ui` or a client creating the same SQLite store at the same moment makes alembic
    fail with 'Online migration expected to match one row'; that race is not an unreachable store."""
    real = db_utils._initialize_tables
    raced: list[int] = []

    def other_process_migrated_first(engine):
        if not raced:
            raced.append(1)
            raise alembic.util.CommandError("Online migration expected to match one row when updating "
                                            "'0584bdc529eb' to 'f5a4f2784254' in 'alembic_version'; 0 found")
        real(engine)

    monkeypatch.setattr(db_utils, "_initialize_tables", other_process_migrated_first)
    client = connect(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert raced and client.get_experiment_by_name("Default") is not None
    run = client.create_run(experiment_id(client, "x"))
    assert client.get_run(run.info.run_id).info.status == "RUNNING"


def test_an_unreachable_server_is_one_line_exit_1(monkeypatch):
    with pytest.raises(RunFailure) as e:
        connect("http://127.0.0.1:9")
    assert "unreachable" in str(e.value) and "http://127.0.0.1:9" in str(e.value)


def test_credentials_in_a_uri_are_hidden():
    assert redact("failed for https://me:secret@host:5000/x") == "failed for https://***@host:5000/x"
