"""The search's parent MLflow run: opened (after the search's state, so a kill between the two leaves a search
`--resume` finds, and whose parent it finds again by its search id), reopened on resume, closed with the summary
and the leaderboard. Child runs a dead process left RUNNING are marked KILLED here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autospeed.outcome import Status
from autospeed.search.storage import SearchDir
from autospeed.show import leaderboard
from autospeed.space import SearchSpec
from autospeed.track import names, runs, writers
from autospeed.track.store import experiment_id, interrupts_held


def open_parent(client, spec: SearchSpec, space_text: str, space_path: str, search_id: str, search_dir: SearchDir,
                 total: int, seed: int) -> str:
    """The search's state on disk first, then its parent run: a driver killed in between leaves a search that
    --resume finds, and whose parent it finds or creates (parent_of), never a second parent."""
    search_dir.path.mkdir(parents=True)
    state = {"search_id": search_id, "parent_run_id": None, "name": spec.name, "space_path": str(space_path),
             "spec": spec.model_dump(mode="json"), "trials": total, "seed": seed}
    search_dir.write_state(state)
    return parent_of(client, spec, space_text, space_path, search_dir, state)


def parent_of(client, spec: SearchSpec, space_text: str, space_path: str, search_dir: SearchDir,
               state: dict[str, Any]) -> str:
    """The search's parent run: the one its state names, else the one tagged with its search id (a kill before
    the state named it), else a new one; its params and space file logged (again: the same values)."""
    if state.get("parent_run_id"):
        return state["parent_run_id"]
    search_id, experiment = state["search_id"], experiment_id(client, spec.name)
    found = client.search_runs([experiment], f"tags.`{names.TAG_SEARCH_ID}` = '{search_id}' and "
                                             f"tags.`{names.TAG_KIND}` = '{names.KIND_SEARCH}'", max_results=1)
    parent_id = found[0].info.run_id if found else client.create_run(
        experiment, run_name=f"search-{search_id}",
        tags={names.TAG_KIND: names.KIND_SEARCH, names.TAG_SEARCH_ID: search_id,
              names.TAG_EXPERIMENT_DIR: str(search_dir.path), names.TAG_TRIALS: str(state["trials"])}).info.run_id
    flat = {**flatten(state["spec"]), "trials": state["trials"], "sampler.seed": state["seed"]}
    writers.log_batch(client, parent_id, params={k: str(v)[:6000] for k, v in flat.items() if v is not None})
    client.log_text(parent_id, space_text, Path(space_path).name)
    search_dir.write_state({**search_dir.read_state(), "parent_run_id": parent_id})
    return parent_id


def reopen_parent(client, parent_id: str) -> None:
    """A resumed search: the parent runs again; runs the dead process left RUNNING become KILLED
    (a trial Tune resumes reopens its own run in on_trial_start)."""
    from mlflow.entities import RunStatus

    client.update_run(parent_id, RunStatus.to_string(RunStatus.RUNNING))
    kill_leftovers(client, runs.trial_rows(client, client.get_run(parent_id)))


def kill_leftovers(client, rows: list[runs.TrialRow]) -> None:
    """Child runs left RUNNING (a killed trial) are marked KILLED, never left lying."""
    for r in rows:
        if r.status == Status.RUNNING:
            writers.mark_killed(client, r.run_id)
            r.status = Status.KILLED.value


def close_parent(client, parent_id: str, rows: list[runs.TrialRow], killed: bool,
                  stop_reason: str | None) -> None:
    """Summary metrics and leaderboard on the parent; KILLED when the trials were interrupted,
    FAILED when the search stopped itself, else FINISHED (also when only the confirmation was
    interrupted: every trial stands, and --resume confirms)."""
    from mlflow.entities import RunStatus

    kill_leftovers(client, rows)
    summary = runs.summary_metrics(rows)
    with interrupts_held():
        writers.log_batch(client, parent_id, writers.metrics({k: v for k, v in summary.items() if v is not None}),
                    tags={names.TAG_ERROR: stop_reason[:500]} if stop_reason else None)
        client.log_text(parent_id, leaderboard.to_csv(rows), "leaderboard.csv")
        status = RunStatus.KILLED if killed else RunStatus.FAILED if stop_reason else RunStatus.FINISHED
        client.set_terminated(parent_id, RunStatus.to_string(status))


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """The spec as the parent run's params: sections one level deep as `section.key`, lists and dicts as JSON."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and prefix.count(".") < 1 and k != "workload_options":
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, (dict, list)) else v
    return out
