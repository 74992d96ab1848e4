"""The whole search, in one function: preflight, trials, confirmation, best.yaml, closing
the parent run (docs/design.md "Data flow"). The CLI and the experiments call `run_search`
and only read its outcome.
"""

from __future__ import annotations

import functools
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autospeed.errors import Interrupted, RunFailure, UserError
from autospeed.outcome import Status
from autospeed.script.options import is_script
from autospeed.search import _ray
from autospeed.search.parent import close_parent, kill_leftovers, open_parent, parent_of, reopen_parent
from autospeed.search.records import counted
from autospeed.search.resume import resume_state, same_script
from autospeed.search.session import SearchSession
from autospeed.search.storage import (
    SearchDir,
    check_writable,
    latest_search_dir,
    search_lock,
    search_root,
    write_refused,
)
from autospeed.space import Param, SearchSpec
from autospeed.track import layout, runs

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
    _check_workers_fit(spec, space_path)  # bad input: before the store, the dataset or Ray are touched
    uri = layout.resolve_tracking_uri(tracking_uri)
    client = layout.connect(uri)
    root = search_root(storage_path, spec.name)
    check_writable(root)
    with search_lock(root, spec.name):
        return _run_search(spec, space_text, space_path, trials=trials, uri=uri, client=client,
                           storage_path=storage_path, ray_address=ray_address, resume=resume, seed=seed,
                           verbose=verbose, console=console, wall_start=wall_start, root=root)


def _run_search(spec: SearchSpec, space_text: str, space_path: str, *, trials, uri: str, client, storage_path,
                ray_address, resume, seed, verbose, console, wall_start: float, root) -> SearchOutcome:
    seed = spec.sampler.seed if seed is None else seed

    # ---- preflight: whatever can fail before training fails here, before any run is created ----
    state = resume_state(spec, storage_path, trials, space_path, console) if resume else None
    total = state["trials"] if state else (trials or spec.budget.trials)
    from autospeed.workloads import check_target, load_workload

    if is_script(spec.workload):  # the script runs to its first step: it starts, and reads every searched knob
        from autospeed.script.preflight import check_script_reads

        spec = check_script_reads(spec, space_path, console)  # the script's own defaults: the base of every run
        if state is not None:
            spec = same_script(spec, state, space_path)
    else:
        try:  # the dataset is prepared once per search, before any trial (cached on disk)
            workload = load_workload(spec.workload, spec.workload_options)
            # a plugin's metrics are known once it is built: the target must name one of them
            check_target(spec.resolved_target, workload.metrics, spec.workload, shorthand=spec.target is None)
        except UserError as e:  # e.g. missing CIFAR-10 data: name the file that asked for it
            raise UserError(f"{space_path}: {e}") from None
    _ray.quiet_ray()
    _ray.start_ray(ray_address, verbose)
    most_workers, asked_by = spec.most_workers()
    resources, concurrent, threads = _ray.trial_resources(
        spec.resources.gpus_per_trial, spec.resources.cpus_per_trial, spec.resources.max_concurrent_trials,
        most_workers)
    if most_workers > 1:
        import ray

        from autospeed.search.data_parallel import placement_problem

        problem = placement_problem(most_workers, threads, spec.resources.gpus_per_trial,
                                    ray.cluster_resources().get("GPU", 0))
        if problem:
            raise UserError(f"{space_path}: key '{asked_by}': {problem}")
        _ray.kill_stopped_trials_after(10)
    _ray.check_storage_shared(root)  # trials read the search's files where they run

    if state is not None:
        search_dir, search_id = latest_search_dir(storage_path, spec.name), state["search_id"]
        parent_id = parent_of(client, spec, space_text, space_path, search_dir, state)
        outbox = _outbox(client, search_dir, spec, console)  # what an earlier session had not sent goes first
        reopen_parent(client, parent_id)
        if "extended_from" in state:  # --resume --trials N: the same search, its study, ASHA and parent run go on
            search_dir.write_state({**search_dir.read_state(), "trials": total})
            client.set_tag(parent_id, layout.TAG_TRIALS, str(total))
    else:
        search_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        search_dir = SearchDir(root / search_id)
        parent_id = open_parent(client, spec, space_text, space_path, search_id, search_dir, total, seed)
        outbox = _outbox(client, search_dir, spec, console)
    # read now: from here to the end of the trials a new search needs no answer from the tracking store
    parent_run = client.get_run(parent_id)
    session = SearchSession(client, parent_id, parent_run.info.experiment_id, search_id, search_dir, outbox, console)
    print(f"search '{spec.name}' ({search_id}): {total} trials of {spec.workload}, "
          f"target {spec.resolved_target.describe()}, budget {spec.budget.max_train_seconds:g} s per trial",
          file=console, flush=True)

    previous_sigint = signal.getsignal(signal.SIGINT)
    previous_sigterm = sigterm_as_sigint()
    outcome = SearchOutcome(spec.name, search_id, parent_id, search_dir, uri, [], False, None, 0.0)
    # a resumed search adds to what its earlier sessions spent exploring
    explored_seconds = parent_run.data.metrics.get(layout.M_EXPLORATION_SECONDS, 0.0)
    try:
        explore_start = time.perf_counter()
        outcome.phase_seconds["start-up (data, Ray, tracking)"] = explore_start - wall_start
        searched = _probed(spec, session, resources, threads)
        outcome.interrupted, outcome.stop_reason, halt = _trials(
            searched, session, total=total, resources=resources, concurrent=concurrent, threads=threads, seed=seed,
            resume=state is not None, verbose=verbose)
        if halt is not None:
            raise Interrupted(halt)
        explored_seconds += time.perf_counter() - explore_start
        outcome.phase_seconds["probe and trials"] = time.perf_counter() - explore_start
        with layout.interrupts_held():
            layout.log_batch(client, parent_id, layout.metrics({layout.M_EXPLORATION_SECONDS: explored_seconds}))
        if previous_sigterm is not None:  # on the main thread, where handlers can be set
            # Ray Tune leaves its own SIGINT handler installed after fit(): Ctrl-C must interrupt from here on.
            signal.signal(signal.SIGINT, previous_sigint)
        outcome.rows = runs.trial_rows(client, client.get_run(parent_id))
        kill_leftovers(client, outcome.rows)
        print(file=console)
        print(runs.format_leaderboard(outcome.rows), file=console, flush=True)
        # a trial that reached, or (a long job) one whose predicted TTA ranks it: confirmed and exported
        ranked = _has_best(outcome.rows, spec.predict.enabled)
        if ranked and not outcome.interrupted and not outcome.stop_reason:
            confirm_start = time.perf_counter()
            _confirm(spec, session, outcome)
            outcome.phase_seconds["confirmation"] = time.perf_counter() - confirm_start
        _delivered(session, spec, outcome.interrupted)  # what follows reads the store
        _report_exploration(spec, client, parent_id, explored_seconds, console)
        if ranked:
            try:
                outcome.best_path = _write_best(session, spec.name)
            except RunFailure as e:  # predict, unconfirmed, nothing reached or predicted: nothing to stand on
                print(f"no best.yaml: {e}", file=console, flush=True)
        trials_interrupted = outcome.interrupted and not outcome.confirmation_interrupted
        close_parent(client, parent_id, outcome.rows, trials_interrupted, outcome.stop_reason)
        if outbox.refused:  # each was said when it happened; the summary counts them
            print(f"tracking: the store refused {counted(len(outbox.refused), 'write')} (each said above, counted "
                  f"on its run as autospeed.tracking_refused); they are in {outbox.path}", file=console, flush=True)
    except BaseException as e:
        # A crash or an interrupt outside the trials: leave no run claiming to be RUNNING. A store that does not
        # answer cannot be told: the resume sends the kept writes first, then marks what is left KILLED.
        killed = isinstance(e, (KeyboardInterrupt, Interrupted))
        if not (isinstance(e, Interrupted) and not outbox.flush(min(30.0, spec.tracking.grace_seconds))):
            close_parent(client, parent_id, runs.trial_rows(client, client.get_run(parent_id)), killed,
                          None if killed else f"{type(e).__name__}: {str(e).strip()[:300]}")
        raise
    finally:
        outbox.close()
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
            signal.signal(signal.SIGINT, previous_sigint)
    outcome.wall_seconds = time.perf_counter() - wall_start
    outcome.phase_seconds["export and close"] = outcome.wall_seconds - sum(outcome.phase_seconds.values())
    return outcome


def _check_workers_fit(spec: SearchSpec, space_path: str) -> None:
    """Data-parallel workers that cannot fit a CPU trial whose cores the file sets (cpus_per_trial) are
    bad input, known without Ray: refused before anything runs. Where the cores or GPUs come from the
    cluster, the check after Ray starts decides."""
    most_workers, asked_by = spec.most_workers()
    cpus = spec.resources.cpus_per_trial
    if most_workers > 1 and not spec.resources.gpus_per_trial and cpus:
        from autospeed.search.data_parallel import placement_problem

        problem = placement_problem(most_workers, cpus, 0, 0)
        if problem:
            raise UserError(f"{space_path}: key '{asked_by}': {problem}")


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
    if is_script(spec.workload):  # the probe times steps of a built-in workload's loop, which a script owns
        print("probe: skipped for a script (it owns its training step); its systems knobs are left to the trials",
              file=console, flush=True)
        return spec
    decision = run_probes(spec, session, resources, threads)
    search_dir.write_state({**state, PROBED_SPACE: decision.spec.model_dump(mode="json")["space"]})
    return decision.spec


def _trials(spec: SearchSpec, session: SearchSession, *, total: int, resources: dict[str, float], concurrent: int,
            threads: int, seed: int, resume: bool, verbose: bool) -> tuple[bool, str | None, str | None]:
    """Every trial under Ray Tune. Returns (interrupted, stop reason, halt: why the search must stop as
    interrupted, resumable: its tracking store silent past the grace, its storage refusing writes).

    Tune records the trials a halt stopped as ended, though none reached its end; the resume sees them missing
    from the ledger and rebuilds from the records, which train them again (records.resume_plan)."""
    from ray import tune

    from autospeed.search.callback import TrialTracker
    from autospeed.search.records import resume_plan
    from autospeed.search.trainable import trainable, trial_resources
    from autospeed.search.tuner import build_tuner

    client, search_dir, outbox = session.client, session.search_dir, session.outbox
    tracker = TrialTracker(session, spec, total, resumed=resume)
    spec_json = spec.model_dump_json()
    gpus = resources["gpu"]
    if spec.most_workers()[0] > 1:
        # Per trial: a one-worker trial holds its resources itself, a data-parallel one only its driver's
        # share (Ray Train's workers reserve theirs).
        resources = functools.partial(trial_resources, spec_json=spec_json, cpus=resources["cpu"], gpus=gpus)
    bound = tune.with_resources(tune.with_parameters(trainable, spec_json=spec_json, threads=threads,
                                                     search_dir=str(search_dir.path), gpus=gpus), resources)
    interrupted = False
    mode, to_run = resume_plan(search_dir, spec.name, total, session.console) if resume else (None, total)
    try:
        if to_run > 0:  # a rebuilt search whose trials had all finished has none left to run
            tuner, tracker.searcher = build_tuner(spec, bound, search_dir, tracker, trials=to_run,
                                                  concurrent=concurrent, seed=seed, resume=mode, verbose=verbose)
            tuner.fit()  # on Ctrl-C/SIGTERM Tune stops the trials, saves the experiment and returns
    except KeyboardInterrupt:
        interrupted = True
    except Exception as e:  # noqa: BLE001 - Optuna's or Tune's own write refused by a full disk: a halt too
        tracker.halt = tracker.halt or write_refused(e, search_dir.path / "optuna.db")
        if tracker.halt is None:
            raise
    finally:
        tracker.view.close()
    if tracker.halt is not None:  # Tune holds the trials it stopped as ended: the resume rebuilds (records.resume_plan)
        return True, None, tracker.halt
    # the trials' records must be in the store to read them; an interrupted search waits only a moment
    unsent = outbox.unsent(min(10.0, spec.tracking.grace_seconds) if interrupted else spec.tracking.grace_seconds)
    if unsent is not None:
        return True, None, unsent
    if tracker.told_down:
        tracker.say_tracking_back()
    rows = runs.trial_rows(client, client.get_run(session.parent_id))
    unfinished = len(rows) < total or any(r.status == Status.RUNNING for r in rows)
    return interrupted or (unfinished and tracker.stop_reason is None), tracker.stop_reason, None


def _delivered(session: SearchSession, spec: SearchSpec, interrupted: bool) -> None:
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


def _has_best(rows: list[runs.TrialRow], predicting: bool = False) -> bool:
    """Some trial reached its target or has a predicted TTA (under predict: trained at all): there is a best
    recipe to confirm and export."""
    from autospeed.track.export import exportable

    return bool(exportable(rows, predicting))


def _report_exploration(spec: SearchSpec, client, parent_id: str, explored_seconds: float, console) -> None:
    """Once a baseline run's cost is known: the probe and trials' wall seconds in baseline runs, printed on a line
    of its own and logged on the parent. A baseline run = its confirmation runs' median wall to target (process
    start to target, as the exploration's seconds are wall seconds), or the given confirm.baseline_tta_seconds."""
    measured = client.get_run(parent_id).data.metrics.get(layout.M_CONFIRM_BASELINE_WALL_MEDIAN)
    base, what = ((measured, "its median wall to target") if measured
                  else (spec.confirm.baseline_tta_seconds, "its given TTA"))
    if not base:
        return
    runs_ = explored_seconds / base
    print(f"exploration: {explored_seconds:.1f} s wall (probe and trials) = {runs_:.2f} baseline runs "
          f"({what}, {base:.1f} s)", file=console, flush=True)
    with layout.interrupts_held():
        layout.log_batch(client, parent_id, layout.metrics({layout.M_EXPLORATION_BASELINE_RUNS: runs_}))


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


def _write_best(session: SearchSession, name: str) -> Path:
    from autospeed.track.export import export

    # this search's, not a same-named one's; a compiled winner's compile cache beside it, as `autospeed export` writes
    path, _ = export(session.client, name, session.search_dir.best_yaml, session.search_id)
    with layout.interrupts_held():
        session.client.log_artifact(session.parent_id, str(path))
    return path


def sigterm_as_sigint():
    """Make SIGTERM (`kill`, a scheduler's stop) end a search the way Ctrl-C does.

    Inside tuner.fit() Ray Tune's own SIGINT handler stops the trials, saves the
    experiment and returns; elsewhere SIGINT raises KeyboardInterrupt. SIGTERM calls
    whichever SIGINT handler is current. Returns the previous handler (None when
    not on the main thread, where signals cannot be set).
    """

    def forward(signum, frame):
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, forward)
    except ValueError:
        return None
