"""The whole search as its pipeline: preflight, probe, trials, confirmation and ablation, export, close
(docs/design.md "Data flow"). Each stage takes the search's session (search/session.py) and its own inputs.
The CLI and the experiments call `run_search` and only read its outcome.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autospeed import _ray
from autospeed.errors import Interrupted, RunFailure, UserError
from autospeed.script.options import is_script
from autospeed.search import rung_trend
from autospeed.search.parent import close_parent, kill_leftovers, open_parent, parent_of, reopen_parent
from autospeed.search.records import all_finished, counted
from autospeed.search.resume import resume_state, same_script
from autospeed.search.session import SearchSession
from autospeed.search.signals import StopsLikeCtrlC
from autospeed.search.storage import (
    SearchDir,
    check_writable,
    latest_search_dir,
    search_lock,
    search_root,
)
from autospeed.search.trials import TrialPlan, run_trials
from autospeed.show import leaderboard
from autospeed.space import Param, SearchSpec
from autospeed.track import names, runs, writers
from autospeed.track.store import connect, interrupts_held, resolve_tracking_uri

PROBED_SPACE = "probed_space"  # key of the search's state: the space the probe narrowed


@dataclass
class SearchOutcome:
    """What a search ended with. `interrupted`: Ctrl-C or SIGTERM (exit 130); `stop_reason`:
    the search stopped itself (the same error trial after trial, a crash; exit 1)."""

    name: str
    search_id: str
    parent_run_id: str
    search_dir: SearchDir
    tracking_uri: str
    rows: list[runs.TrialRow]
    interrupted: bool
    stop_reason: str | None
    wall_seconds: float
    confirmation: Any = None  # confirm.ConfirmOutcome, or None when confirmation did not run
    confirmation_interrupted: bool = False
    best_path: Path | None = None  # best.yaml in the search's folder (also logged on the parent run)
    # where this session's wall went, in order: phase -> seconds (start-up, probe and trials, confirmation, ...)
    phase_seconds: dict[str, float] = field(default_factory=dict)

    def phases_text(self) -> str:
        """'start-up 9.8 s, probe and trials 49.7 s, confirmation 45.1 s, export and close 2.0 s'."""
        return ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in self.phase_seconds.items()
                         if seconds >= 0.05)  # a phase that did not run (no confirmation) is left out

    @property
    def experiment_dir(self) -> Path:
        return self.search_dir.path

    @property
    def summary(self) -> dict[str, Any]:
        return runs.summary_metrics(self.rows)


def run_search(spec: SearchSpec, space_text: str, space_path: str, *, trials: int | None = None,
               tracking_uri: str | None = None, storage_path: str | None = None, ray_address: str | None = None,
               resume: bool = False, seed: int | None = None, verbose: bool = False,
               console=sys.stdout) -> SearchOutcome:
    """Run (or resume) a search to its end: every trial, the confirmation runs, best.yaml.

    Returns when all of that is done or the search was interrupted; raises UserError /
    RunFailure for what fails before any run is created. One search of a name runs on a storage path at a
    time (storage.search_lock): a second refuses, naming the first's host and pid.
    """
    wall_start = time.perf_counter()
    asked = _Asked(spec, space_text, space_path, trials, storage_path, ray_address, resume, seed, verbose, console)
    workers, _ = spec.most_workers()
    if workers > 1 and not spec.resources.gpus_per_trial and spec.resources.cpus_per_trial:
        # bad input known without Ray: workers that cannot fit the cores the file sets a CPU trial
        _check_placement(asked, spec.resources.cpus_per_trial, 0)
    uri = resolve_tracking_uri(tracking_uri)
    client = connect(uri)
    root = search_root(storage_path, spec.name)
    check_writable(root)
    with search_lock(root, spec.name):
        return _run_search(asked, client, uri, root, wall_start)


@dataclass(frozen=True)
class _Asked:
    """What run_search was asked: the space file (as validated, its text, its path) and the command's options."""

    spec: SearchSpec
    space_text: str
    space_path: str
    trials: int | None
    storage_path: str | None
    ray_address: str | None
    resume: bool
    seed: int | None
    verbose: bool
    console: Any


def _run_search(asked: _Asked, client, uri: str, root: Path, wall_start: float) -> SearchOutcome:
    """The pipeline, under the search's lock."""
    state = resume_state(asked.spec, asked.storage_path, asked.trials, asked.space_path, asked.console) \
        if asked.resume else None
    with _script_folder(asked.spec, state):
        spec = _preflight(asked, state)
        plan = _start_ray(spec, asked, state, root)
        session, explored_before = _open_session(spec, asked, state, client, root, plan)
        outcome = SearchOutcome(spec.name, session.search_id, session.parent_id, session.search_dir, uri, [], False,
                                None, 0.0)
        outcome.phase_seconds["start-up (data, Ray, tracking)"] = time.perf_counter() - wall_start
        with StopsLikeCtrlC() as signals, _closed_however_it_ends(spec, session):
            explored = _explore(spec, session, plan, outcome, explored_before)
            signals.restore_sigint()
            _finish(spec, session, outcome, explored)
    outcome.wall_seconds = time.perf_counter() - wall_start
    outcome.phase_seconds["export and close"] = outcome.wall_seconds - sum(outcome.phase_seconds.values())
    return outcome


@contextlib.contextmanager
def _script_folder(spec: SearchSpec, state: dict[str, Any] | None):
    """A script search starts its script in the folder the search was first started from, a resumed one too,
    wherever it is resumed from: the preflight, confirmation and ablation (this process and the fresh ones it
    starts) through the environment set here, restored after; the trials through search/trainable.py (Ray moves
    each into its trial folder)."""
    if not is_script(spec.workload):
        yield
        return
    from autospeed.script import channel

    folder = (state["spec"].get("script_workdir") if state is not None else None) or spec.script_workdir \
        or os.getcwd()
    before = os.environ.get(channel.WORKDIR)
    os.environ[channel.WORKDIR] = folder
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(channel.WORKDIR, None)
        else:
            os.environ[channel.WORKDIR] = before


def _preflight(asked: _Asked, state: dict[str, Any] | None) -> SearchSpec:
    """Whatever can fail before training fails here, before any run is created: a script runs to its first step
    (it starts and reads every searched knob; its own defaults become the base of every run); a built-in
    workload's dataset is prepared once (cached on disk) and its target checked against its metrics. Returns the
    spec the search runs."""
    from autospeed.workloads import check_target, load_workload

    spec, space_path = asked.spec, asked.space_path
    if is_script(spec.workload):
        from autospeed.script.preflight import check_script_reads

        spec = check_script_reads(spec, space_path, asked.console)
        return same_script(spec, state, space_path) if state is not None else spec
    try:
        workload = load_workload(spec.workload, spec.workload_options)
        # a plugin's metrics are known once it is built: the target must name one of them
        check_target(spec.resolved_target, workload.metrics, spec.workload, shorthand=spec.target is None)
    except UserError as e:  # e.g. missing CIFAR-10 data: name the file that asked for it
        raise UserError(f"{space_path}: {e}") from None
    return spec


def _start_ray(spec: SearchSpec, asked: _Asked, state: dict[str, Any] | None, root: Path) -> TrialPlan:
    """Ray started (or joined), and each trial's resources fitted to it; data-parallel trials whose group cannot
    be placed, or a storage path the trials cannot read where they run, refused here. A resumed search with no
    trial left to train (killed in confirmation or the ablation) starts no Ray: nothing would run on it."""
    total = state["trials"] if state else (asked.trials or spec.budget.trials)
    seed = spec.sampler.seed if asked.seed is None else asked.seed
    if state is not None and _nothing_to_train(spec, state, asked.storage_path, total):
        _ray.check_ray_address(asked.ray_address)  # bad input all the same
        return TrialPlan(total, seed, {"cpu": 0, "gpu": 0}, 1, 1, True, asked.verbose)
    _ray.quiet_ray()
    _ray.start_ray(asked.ray_address, asked.verbose)
    res = spec.resources
    most_workers, _ = spec.most_workers()
    resources, concurrent, threads = _ray.trial_resources(res.gpus_per_trial, res.cpus_per_trial,
                                                          res.max_concurrent_trials, most_workers)
    if most_workers > 1:
        import ray

        _check_placement(asked, threads, ray.cluster_resources().get("GPU", 0))
        _ray.kill_stopped_trials_after(10)
    _ray.check_storage_shared(root)  # trials read the search's files where they run
    return TrialPlan(total, seed, resources, concurrent, threads, state is not None, asked.verbose)


def _nothing_to_train(spec: SearchSpec, state: dict[str, Any], storage_path: str | None, total: int) -> bool:
    """Every trial is in the search's ledger and the probe has decided (or has nothing to): no Ray task is left."""
    from autospeed.search.probe_decide import wants_probe

    return all_finished(latest_search_dir(storage_path, spec.name), total) and (
        PROBED_SPACE in state or not wants_probe(spec))


def _check_placement(asked: _Asked, cpus: int, cluster_gpus: float) -> None:
    """Data-parallel workers that cannot be placed on `cpus` cores a trial (and the cluster's GPUs, where trials
    take GPUs) are bad input: refused before any run is created, naming the key that asked for them."""
    from autospeed.parallel.launch import placement_problem

    most_workers, asked_by = asked.spec.most_workers()
    problem = placement_problem(most_workers, cpus, asked.spec.resources.gpus_per_trial, cluster_gpus)
    if problem:
        raise UserError(f"{asked.space_path}: key '{asked_by}': {problem}")


def _open_session(spec: SearchSpec, asked: _Asked, state: dict[str, Any] | None, client, root: Path,
                  plan: TrialPlan) -> tuple[SearchSession, float]:
    """The search's session: its parent run opened (a new search) or found and reopened (a resumed one, whose
    journal sends what an earlier session kept first). Returns it and the seconds earlier sessions explored."""
    if state is not None:
        search_dir, search_id = latest_search_dir(asked.storage_path, spec.name), state["search_id"]
        parent_id = parent_of(client, spec, asked.space_text, asked.space_path, search_dir, state)
        outbox = _outbox(client, search_dir, spec, asked.console)  # what an earlier session had not sent goes first
        reopen_parent(client, parent_id)
        if "extended_from" in state:  # --resume --trials N: the same search, its study, ASHA and parent run go on
            search_dir.write_state({**search_dir.read_state(), "trials": plan.total})
            client.set_tag(parent_id, names.TAG_TRIALS, str(plan.total))
    else:
        search_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        search_dir = SearchDir(root / search_id)
        parent_id = open_parent(client, spec, asked.space_text, asked.space_path, search_id, search_dir, plan.total,
                                plan.seed)
        outbox = _outbox(client, search_dir, spec, asked.console)
    # read now: from here to the end of the trials a new search needs no answer from the tracking store
    parent_run = client.get_run(parent_id)
    session = SearchSession(client, parent_id, parent_run.info.experiment_id, search_id, search_dir, outbox,
                            asked.console)
    print(f"search '{spec.name}' ({search_id}): {plan.total} trials of {spec.workload}, "
          f"target {spec.resolved_target.describe()}, budget {spec.budget.max_train_seconds:g} s per trial",
          file=asked.console, flush=True)
    # a resumed search adds to what its earlier sessions spent exploring
    return session, parent_run.data.metrics.get(names.M_EXPLORATION_SECONDS, 0.0)


@contextlib.contextmanager
def _closed_however_it_ends(spec: SearchSpec, session: SearchSession):
    """The journal closed however the search ends. A crash or an interrupt outside the trials leaves no run
    claiming to be RUNNING: the parent is closed with it. A store that does not answer cannot be told: the resume
    sends the kept writes first, then marks what is left KILLED."""
    client, parent_id, outbox = session.client, session.parent_id, session.outbox
    try:
        yield
    except BaseException as e:
        killed = isinstance(e, (KeyboardInterrupt, Interrupted))
        if not (isinstance(e, Interrupted) and not outbox.flush(min(30.0, spec.tracking.grace_seconds))):
            close_parent(client, parent_id, runs.trial_rows(client, client.get_run(parent_id)), killed,
                         None if killed else f"{type(e).__name__}: {str(e).strip()[:300]}")
        raise
    finally:
        outbox.close()


def _explore(spec: SearchSpec, session: SearchSession, plan: TrialPlan, outcome: SearchOutcome,
             explored_before: float) -> float:
    """The probe and the trials. Returns the wall seconds the search has explored, earlier sessions' included,
    as logged on the parent."""
    explore_start = time.perf_counter()
    searched = _probed(spec, session, plan.resources, plan.threads)
    outcome.interrupted, outcome.stop_reason, halt = run_trials(searched, session, plan)
    if halt is not None:
        raise Interrupted(halt)
    explored = explored_before + time.perf_counter() - explore_start
    outcome.phase_seconds["probe and trials"] = time.perf_counter() - explore_start
    with interrupts_held():
        writers.log_batch(session.client, session.parent_id, writers.metrics({names.M_EXPLORATION_SECONDS: explored}))
    return explored


def _finish(spec: SearchSpec, session: SearchSession, outcome: SearchOutcome, explored_seconds: float) -> None:
    """After the trials: the leaderboard, confirmation and ablation of a ranked best, best.yaml, the parent closed."""
    client, console = session.client, session.console
    outcome.rows = runs.trial_rows(client, client.get_run(session.parent_id))
    kill_leftovers(client, outcome.rows)
    print(file=console)
    print(leaderboard.table(outcome.rows), file=console, flush=True)
    # a trial that reached, or (a long job: predict, or a production budget) any that trained: confirmed, exported
    ranked = _has_best(outcome.rows, spec)
    if ranked and not outcome.interrupted and not outcome.stop_reason:
        confirm_start = time.perf_counter()
        _confirm(spec, session, outcome)
        outcome.phase_seconds["confirmation"] = time.perf_counter() - confirm_start
    _delivered(spec, session, outcome.interrupted)  # what follows reads the store
    _report_exploration(spec, session, explored_seconds)
    if not (outcome.interrupted or outcome.stop_reason):  # where the best lr / batch size moved, reached or not
        rung_trend.report(spec, session, outcome.rows)
    if ranked:
        try:
            outcome.best_path = _write_best(session, spec.name)
        except RunFailure as e:  # predict, unconfirmed, nothing reached or predicted: nothing to stand on
            print(f"no best.yaml: {e}", file=console, flush=True)
    trials_interrupted = outcome.interrupted and not outcome.confirmation_interrupted
    close_parent(client, session.parent_id, outcome.rows, trials_interrupted, outcome.stop_reason)
    if session.outbox.refused:  # each was said when it happened; the summary counts them
        print(f"tracking: the store refused {counted(len(session.outbox.refused), 'write')} (each said above, "
              f"counted on its run as autospeed.tracking_refused); they are in {session.outbox.path}", file=console,
              flush=True)


def _probed(spec: SearchSpec, session: SearchSession, resources: dict[str, float], threads: int) -> SearchSpec:
    """The spec the trials search: the space as the probe stage narrowed it (search/probe.py), or the
    file's when the probe is off or has nothing to decide. Probed once: a resumed search reuses it."""
    from autospeed.search.probe import run_probes, wants_probe

    search_dir, console = session.search_dir, session.console
    state = search_dir.read_state()
    if PROBED_SPACE in state:
        return spec.model_copy(update={"space": {k: Param.model_validate(v) for k, v in state[PROBED_SPACE].items()}})
    if not wants_probe(spec):
        return spec
    if spec.most_workers()[0] > 1:  # the probe times one process's steps; a data-parallel recipe needs its group
        print(f"probe: skipped for data-parallel trials ('{spec.most_workers()[1]}' asks for "
              f"{spec.most_workers()[0]} workers); their systems knobs are left to the trials", file=console,
              flush=True)
        return spec
    decision = run_probes(spec, session, resources, threads)
    search_dir.write_state({**state, PROBED_SPACE: decision.spec.model_dump(mode="json")["space"]})
    return decision.spec


def _confirm(spec: SearchSpec, session: SearchSession, outcome: SearchOutcome) -> None:
    """Confirmation runs, then the ablation, written through the search's journal. A resumed search keeps every
    run an earlier session finished (search/confirm_ledger.py) and trains only the rest: none when it had
    confirmed already, whose summary it prints again as it was."""
    from autospeed.search.confirm import run_confirmation
    from autospeed.search.confirm_ledger import RunLedger
    from autospeed.search.confirm_text import compute_line, format_confirmation

    if spec.confirm.repeats <= 0:
        return
    console = session.console
    ledger = RunLedger(session, len(outcome.rows))
    try:
        outcome.confirmation = run_confirmation(session, spec, ledger)
    except KeyboardInterrupt:  # the confirm run in progress was marked KILLED; the search's trials stand
        outcome.interrupted = outcome.confirmation_interrupted = True
        print("\nconfirmation interrupted: the best recipe below is the search's, unconfirmed", file=sys.stderr)
        return
    confirmed = outcome.confirmation
    if confirmed is None:
        return
    if spec.confirm.ablation and confirmed.winner is not None and confirmed.baseline is not None:
        from autospeed.search.ablation import run_ablation

        ablated = run_ablation(session, spec, confirmed.winner, confirmed.baseline.recipe, confirmed.speedup, ledger)
        confirmed.ablation, confirmed.ablation_interrupted = ablated or [], ablated is None
    print(file=console)
    print(format_confirmation(confirmed), file=console, flush=True)
    print(compute_line(confirmed), file=console, flush=True)
    if confirmed.ablation_interrupted:  # the confirmation stands; the exit says interrupted
        outcome.interrupted = outcome.confirmation_interrupted = True


def _delivered(spec: SearchSpec, session: SearchSession, interrupted: bool) -> None:
    """Wait until the store has every write confirmation and ablation journaled (an interrupted search only a
    moment); said where there is a wait; past it, the search stops as interrupted, resumable."""
    outbox, console = session.outbox, session.console
    if not outbox.pending:
        return
    down = outbox.down_seconds()
    if down:
        print(f"tracking: waiting up to {spec.tracking.grace_seconds:g} s (tracking.grace_seconds) for the store to "
              f"take the {counted(outbox.pending, 'write')} kept in {outbox.path} ({outbox.last_error})",
              file=console, flush=True)
    unsent = outbox.unsent(min(10.0, spec.tracking.grace_seconds) if interrupted else spec.tracking.grace_seconds)
    if unsent is not None:
        raise Interrupted(unsent)
    if down:
        seconds, held = outbox.outages[-1] if outbox.outages else (down, 0)
        print(f"tracking: the store answers again after {seconds:.0f} s; the {held} writes kept meanwhile are sent "
              f"in order", file=console, flush=True)


def _report_exploration(spec: SearchSpec, session: SearchSession, explored_seconds: float) -> None:
    """Once a baseline run's cost is known: the probe and trials' wall seconds in baseline runs, printed on a line
    of its own and logged on the parent. A baseline run = its confirmation runs' median wall to target (process
    start to target, as the exploration's seconds are wall seconds), or the given confirm.baseline_tta_seconds."""
    client, parent_id = session.client, session.parent_id
    measured = client.get_run(parent_id).data.metrics.get(names.M_CONFIRM_BASELINE_WALL_MEDIAN)
    base, what = ((measured, "its median wall to target") if measured
                  else (spec.confirm.baseline_tta_seconds, "its given TTA"))
    if not base:
        return
    runs_ = explored_seconds / base
    print(f"exploration: {explored_seconds:.1f} s wall (probe and trials) = {runs_:.2f} baseline runs "
          f"({what}, {base:.1f} s)", file=session.console, flush=True)
    with interrupts_held():
        writers.log_batch(client, parent_id, writers.metrics({names.M_EXPLORATION_BASELINE_RUNS: runs_}))


def _has_best(rows: list[runs.TrialRow], spec: SearchSpec) -> bool:
    """Some trial reached its target or has a predicted TTA (trials short by design: trained at all): there is a
    best recipe to confirm and export."""
    from autospeed.track.export import exportable, short_trials

    return bool(exportable(rows, short_trials(spec.predict.enabled, spec.confirm.max_train_seconds)))


def _write_best(session: SearchSession, name: str) -> Path:
    from autospeed.track.export import export

    # this search's, not a same-named one's; a compiled winner's compile cache beside it, as `autospeed export` writes
    path, _ = export(session.client, name, session.search_dir.best_yaml, session.search_id)
    with interrupts_held():
        session.client.log_artifact(session.parent_id, str(path))
    return path


def _outbox(client, search_dir: SearchDir, spec: SearchSpec, console):
    """The search's tracking outbox (track/outbox.py); a resumed search's kept writes are sent before anything
    reads the store."""
    from autospeed.track.outbox import Outbox

    outbox = Outbox(client, search_dir.path, spec.tracking.grace_seconds)
    kept = outbox.pending
    if kept:
        if not outbox.flush(spec.tracking.grace_seconds):
            outbox.close()
            raise RunFailure(f"the tracking store did not take the {kept} tracking writes an earlier session kept in "
                             f"{outbox.path} ({outbox.last_error}); check the tracking server, then resume again")
        print(f"resume: sent the {counted(kept, 'tracking write')} an earlier session had kept on disk", file=console,
              flush=True)
    return outbox
