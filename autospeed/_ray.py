"""Ray set-up, and every Ray-version workaround in one place.

Private Ray attributes are reached only here, each because no public way exists,
and tests/search/test__ray.py fails loudly when a Ray release moves them.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import warnings
from typing import Any

from autospeed.errors import RunFailure, UserError


def quiet_ray() -> None:
    """No calls home, no loggers the user did not ask for, experiment state saved after every event."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no CSV/JSON/TensorBoard loggers
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "100")
    # Save Tune's experiment state after every event, so a killed search loses no finished trial.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "0")
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    for name in ("ray", "ray.tune", "ray.train", "ray.air"):
        logging.getLogger(name).setLevel(logging.ERROR)
    state_logger = logging.getLogger("ray.tune.execution.experiment_state")
    if not any(isinstance(f, SnapshotRaceFilter) for f in state_logger.filters):
        state_logger.addFilter(SnapshotRaceFilter())
    warnings.filterwarnings("ignore", module="ray")
    # A resumed trial reports its steps again to the same Optuna trial; Optuna keeps the first.
    warnings.filterwarnings("ignore", message="The reported value is ignored")


class SnapshotRaceFilter(logging.Filter):
    """Drops Ray Tune's harmless "Saving experiment state ... failed" traceback.

    Ray Tune (2.60) writes the next snapshot of the experiment state into its staging
    folder while the previous snapshot is still being copied to the storage path; when
    the copy lists a temporary file (`.<uuid>-tmp-searcher-state-*.pkl`) that the new
    write has renamed meanwhile, the copy fails with FileNotFoundError and Tune logs the
    traceback. Nothing is lost: the snapshot being written is copied next, and the last
    one is copied and awaited when the search ends. Every other failure is kept.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, FileNotFoundError) and "-tmp-" in str(exc)
                    and str(record.msg).startswith("Saving experiment state"))


_RAY_ADDRESS = re.compile(r"^(?:ray://)?(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\]):(?P<port>[0-9]{1,5})$")


def check_ray_address(address: str | None, timeout_seconds: float = 5.0) -> None:
    """Preflight for --ray-address: malformed is bad input (exit 2), unreachable a
    runtime failure (exit 1). `ray.init` itself would retry a dead address for minutes."""
    if not address or address in ("auto", "local"):
        return
    m = _RAY_ADDRESS.match(address)
    if not m or not 0 < int(m["port"]) < 65536:
        raise UserError(f"--ray-address: malformed address '{address}'; use host:port (e.g. 10.0.0.5:6379), "
                        f"ray://host:10001 or auto")
    host = m["host"].strip("[]")
    try:
        socket.create_connection((host, int(m["port"])), timeout=timeout_seconds).close()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise RunFailure(f"--ray-address: cannot reach Ray at {address} ({why}); start it there with "
                         f"`ray start --head` or fix the address") from None


def start_ray(address: str | None, verbose: bool) -> None:
    import ray

    if ray.is_initialized():
        return
    check_ray_address(address)
    kwargs = dict(include_dashboard=False, log_to_driver=verbose,
                  logging_level=logging.INFO if verbose else logging.ERROR, configure_logging=True)
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(address="local", **kwargs)  # "local": never join a cluster `ray start` left running
    except (ConnectionError, TimeoutError, RuntimeError) as e:
        where = address or "a local Ray instance"
        raise RunFailure(f"cannot start or join Ray at {where} ({str(e).splitlines()[0][:200]}); "
                         f"check --ray-address or that `ray start` runs there") from None


def _reads(path: str) -> str | None:
    """What this node reads at `path` (None: nothing there)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def check_storage_shared(folder, timeout_seconds: float = 300.0) -> None:
    """Preflight on a cluster: trials read the search's files (ledger, recipe index) under the
    storage path on their own node, so every node must see the folder the driver writes. A
    probe file written here is read back on each other node (docs/design.md "Scale-out"); a node
    that cannot read it fails the search before any run is created, in one line."""
    import uuid

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    others = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] != here]
    if not others:
        return  # one node, the driver's: it sees what the driver wrote
    token = uuid.uuid4().hex
    probe = folder / f".node-check-{token}"
    probe.write_text(token)
    read = ray.remote(num_cpus=0)(_reads)
    try:
        pending = {n["NodeID"]: read.options(
                       scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(str(probe))
                   for n in others}
        try:
            seen = dict(zip(pending, ray.get(list(pending.values()), timeout=timeout_seconds)))
        except Exception as e:  # a node that cannot run autospeed's code, or does not answer
            raise RunFailure(f"cannot check that every Ray node sees --storage-path {folder} "
                             f"({str(e).strip().splitlines()[-1][:200]}); install autospeed on every node "
                             f"and check the cluster with `ray status`") from None
    finally:
        probe.unlink(missing_ok=True)
    blind = [n for n in others if seen[n["NodeID"]] != token]
    if blind:
        names = ", ".join(f"{n.get('NodeManagerAddress', '?')} (node {n['NodeID'][:8]})" for n in blind)
        raise RunFailure(f"--storage-path: {folder} is not visible on {len(blind)} of the cluster's "
                         f"{len(others) + 1} nodes ({names}); trials read the search's files there, so pass a "
                         f"folder every node mounts at the same path (a shared file system)")


def kill_stopped_trials_after(seconds: int) -> None:
    """Tune stops a trial gracefully and kills its actor only when that has not ended it after
    TUNE_FORCE_TRIAL_CLEANUP_S (600 s by default). A safety net only: on Ray 2.60 a stop ends the
    actor at once (Tune schedules a trial's next step after the scheduler's decision, so the actor is
    idle). It does not free a stopped data-parallel trial's cores: ending its actor ends Ray Train's
    controller, and the workers' placement group outlives them (Ray Train's PlacementGroupCleaner asks
    the state API, which a Ray without its dashboard does not serve). ASHA therefore never has Tune
    stop such a trial; it asks its workers (search/data_parallel.py request_stop). Read when the
    Tuner starts: call before it."""
    os.environ.setdefault("TUNE_FORCE_TRIAL_CLEANUP_S", str(seconds))


def stop_ray() -> None:
    """The search's Ray processes would share the cores with timed runs after it (confirmation)."""
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def trial_resources(gpus_per_trial: int, cpus_per_trial: int | None, max_concurrent_trials: int | None,
                    workers_per_trial: int = 1) -> tuple[dict[str, float], int, int]:
    """(per-trial resources, concurrent trials, torch threads per trial) on the Ray cluster joined.

    docs/design.md "Concurrency": one whole GPU per trial (per worker, with data-parallel workers); on
    CPU one trial at a time with all the cores of one node (a trial cannot span nodes, so on a
    cluster the largest node's)."""
    import ray

    cluster = ray.cluster_resources()
    gpus = gpus_per_trial
    if gpus:
        cpus = cpus_per_trial or 4
        if cluster.get("GPU", 0) < gpus:
            raise RunFailure(f"resources.gpus_per_trial is {gpus} but Ray sees {int(cluster.get('GPU', 0))} GPUs; "
                             f"set gpus_per_trial: 0 for a CPU search or join a cluster with GPUs")
        concurrent = max_concurrent_trials or max(1, int(cluster.get("GPU", 0) // (gpus * workers_per_trial)))
    else:
        node_cpus = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
        cpus = cpus_per_trial or max(1, int(max(node_cpus, default=cluster.get("CPU", 1))))
        concurrent = max_concurrent_trials or 1
    return {"cpu": cpus, "gpu": gpus}, concurrent, cpus


def run_config_of(tuner) -> Any:
    """The RunConfig a Tuner will run with. Private: `Tuner.restore` takes no run_config and
    the Tuner has no public accessor, so a restored Tuner's pickled callbacks and stopper can
    only be replaced through its internal tuner (Ray 2.60: `Tuner._local_tuner.get_run_config()`)."""
    return tuner._local_tuner.get_run_config()


def tune_config_of(tuner) -> Any:
    """The TuneConfig a Tuner will run with. Private, for the same reason as run_config_of: a
    restored Tuner runs with the search algorithm and scheduler pickled when the search began
    (Ray 2.60: `Tuner._local_tuner._tune_config`)."""
    return tuner._local_tuner._tune_config


def reattach(tuner, callbacks: list, stop, verbose: bool, *, search=None, scheduler=None) -> None:
    """Point a restored Tuner at this process's callbacks and stopper (the pickled ones belong
    to the process that ran before), and at this process's search algorithm and scheduler when
    given: Tune restores a search algorithm's state (the Optuna study and sampler, the trial
    count) into whichever it runs with, but never saves its scheduler's."""
    run_config = run_config_of(tuner)
    run_config.callbacks = callbacks
    run_config.stop = stop
    run_config.verbose = 2 if verbose else 0
    tune_config = tune_config_of(tuner)
    if search is not None:
        tune_config.search_alg = search
    if scheduler is not None:
        tune_config.scheduler = scheduler
