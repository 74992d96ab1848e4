"""One search session: what every stage of a search (probe, trials, confirmation, ablation, export, close) shares,
built once in search/run.py after the parent run is opened or found again.

Optuna's `Study` carries its storage, sampler and pruner the same way: a stage takes the session, and only its
own inputs besides (the spec it searches, its resources, its counts)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TextIO

from autospeed.search.storage import SearchDir


@dataclass(frozen=True)
class SearchSession:
    """`client`: the MLflow tracking client (reads; `outbox` takes the trials', confirmation's and ablation's
    writes, track/outbox.py); `parent_id` and `experiment_id`: the search's parent run and its MLflow
    experiment; `search_id` and `search_dir`: the search's id and its folder on the storage path
    (search/storage.py); `console`: where the search's lines for people are printed."""

    client: Any
    parent_id: str
    experiment_id: str
    search_id: str
    search_dir: SearchDir
    outbox: Any
    console: TextIO

    @classmethod
    def direct(cls, client, parent, search_id: str, search_dir: SearchDir,
               console: TextIO = sys.stdout) -> SearchSession:
        """A session over the finished search `parent` (its MLflow run) with no journal: its writes go straight
        to the store (track/outbox.Direct). `autospeed explain` works in one; so can a test."""
        from autospeed.track.outbox import Direct

        return cls(client, parent.info.run_id, parent.info.experiment_id, search_id, search_dir, Direct(client),
                   console)
