"""The confirmation and ablation side of experiments/kill_anywhere.py: where in a search a kill landed (read from
the killed run's own output), and whether the search's confirmation and ablation runs came through the kills
whole (docs/design.md "Crash anywhere, lose nothing"; issue 40).

A production run (a confirmation or ablation run: autospeed.kind confirm or ablation) is keyed by (kind, trial id,
ablated knob, round). Lost: a run FINISHED in MLflow after some kill that is not FINISHED at the end, or whose TTA
changed since. Duplicated: a key FINISHED twice. Also checked at the end: no production run left RUNNING; the
confirmation recorded (the parent's confirm_repeats), with exactly one finished run per candidate and round, and
the ablation (where the parent has one) with exactly one per knob set back (and the winner's own) and round.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from autospeed.track import names

# Lines the search prints as it enters each phase (search/confirm_text.py, search/ablation.py): the
# last one a killed run printed says where the kill landed.
PHASES = (("confirming ", "confirmation"), ("ablation: the winner with each of", "ablation"),
          ("confirmation compute:", "export and close"))
FIRST_PHASE = "start-up and trials"
PRODUCTION = (names.KIND_CONFIRM, names.KIND_ABLATION)


def phase_of(lines: list[str]) -> str:
    """Where a run was when it was killed: the phase of the last phase line it printed."""
    phase = FIRST_PHASE
    for line in lines:
        phase = next((name for start, name in PHASES if line.startswith(start)), phase)
    return phase


def _key(run) -> tuple[str, str, str, str]:
    tags = run.data.tags
    return (tags.get(names.TAG_KIND, ""), tags.get(names.TAG_TRIAL_ID, ""), tags.get(names.TAG_ABLATION_KNOB, ""),
            tags.get(names.TAG_CONFIRM_REPEAT, ""))


def _production_runs(client, parent_id: str) -> list:
    experiment = client.get_run(parent_id).info.experiment_id
    runs = client.search_runs([experiment], max_results=5000,
                              filter_string=f"tags.`{names.TAG_PARENT}` = '{parent_id}'")
    return [r for r in runs if r.data.tags.get(names.TAG_KIND) in PRODUCTION]


@dataclass
class ProductionRecord:
    """What a search's kills did to its confirmation and ablation runs."""

    seen: dict[str, tuple] = field(default_factory=dict)  # run id -> (key, TTA) of each run FINISHED after a kill
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    finished: int = 0  # production runs FINISHED at the end

    def after_kill(self, uri: str) -> None:
        """Note every production run FINISHED now (none before the search has a parent run)."""
        client, parent = _client_and_parent(uri)
        if parent is None:
            return
        for r in _production_runs(client, parent.info.run_id):
            if r.info.status == "FINISHED":
                self.seen[r.info.run_id] = (_key(r), r.data.metrics.get(names.M_TTA))

    def check(self, uri: str, confirm_repeats: int) -> None:
        """The end-of-search checks (module docstring); what does not hold goes to `problems`."""
        client, parent = _client_and_parent(uri)
        if parent is None:
            return
        runs = _production_runs(client, parent.info.run_id)
        left = [" ".join(_key(r)) for r in runs if r.info.status == "RUNNING"]
        if left:
            self.problems.append(f"confirmation or ablation runs left RUNNING: {left}")
        finished = {r.info.run_id: r for r in runs if r.info.status == "FINISHED"}
        self.finished = len(finished)
        self.lost = sorted(" ".join(key) for run_id, (key, tta) in self.seen.items()
                           if run_id not in finished or finished[run_id].data.metrics.get(names.M_TTA) != tta)
        keys = [_key(r) for r in finished.values()]
        self.duplicated = sorted({" ".join(k) for k in keys if keys.count(k) > 1})
        if self.lost:
            self.problems.append(f"confirmation or ablation runs lost (FINISHED after a kill, not at the end, or "
                                 f"changed): {self.lost}")
        if self.duplicated:
            self.problems.append(f"confirmation or ablation runs finished twice: {self.duplicated}")
        if confirm_repeats:
            self._planned(parent, keys)

    def _planned(self, parent, keys: list[tuple[str, str, str, str]]) -> None:
        rounds = parent.data.metrics.get(names.M_CONFIRM_REPEATS)
        if rounds is None:
            self.problems.append("no confirmation recorded on the parent run (its confirm_repeats metric)")
            return
        confirm = [k for k in keys if k[0] == names.KIND_CONFIRM]
        candidates = {k[1] for k in confirm}
        if len(confirm) != len(candidates) * rounds:
            self.problems.append(f"{len(confirm)} finished confirmation runs, not {len(candidates)} recipes x "
                                 f"{rounds:g} rounds")
        record = json.loads(parent.data.tags.get(names.TAG_ABLATION, "{}"))
        ablation = [k for k in keys if k[0] == names.KIND_ABLATION]
        if len(ablation) != (len(record) + 1) * rounds * bool(record):
            self.problems.append(f"{len(ablation)} finished ablation runs, not ({len(record)} knobs + the winner) x "
                                 f"{rounds:g} rounds")


def _client_and_parent(uri: str, name: str = "killed"):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        return client, None
    parents = client.search_runs([experiment.experiment_id],
                                 filter_string=f"tags.`{names.TAG_KIND}` = '{names.KIND_SEARCH}'")
    return client, (parents[0] if parents else None)
