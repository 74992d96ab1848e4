"""A search's data-parallel trials: how Tune reserves them and how ASHA stops them (docs/design.md "Scale-out").

The workers themselves are started by autospeed.parallel.launch (Ray Train's TorchTrainer), as for `autospeed
train`; this is the search's side of them.
- The Tune trial's function is the Train run's driver (Ray's Train-in-Tune pattern, Train V2): it only
  waits, so it reserves DRIVER_CPUS; the workers hold the trial's cores (split evenly) and one GPU each.
  Every worker reports at every evaluation (Ray Train's report is a barrier) and Ray's TuneReportCallback
  hands rank 0's report to Tune, so ASHA, Optuna and the tracking callback see one trial, with rank 0's clock.
- ASHA stops such a trial by asking its workers (`request_stop`): they end the run at their next
  evaluation, with a final report, as the trainer ends any run its `on_eval` stops, and Ray Train's
  own shutdown frees their cores. Tune's stop would end the trial's actor and with it Ray Train's
  controller, whose workers' placement group then outlives them until Ray shuts down (Ray 2.60: Ray
  Train's PlacementGroupCleaner asks the state API, which a Ray without its dashboard does not
  serve), so the next trial's workers would wait for the cores.
"""

from __future__ import annotations

from pathlib import Path

DRIVER_CPUS = 0.01  # logical CPUs of a Tune trial that only drives a Train run: a token share of one core
STOP_FILE = "stop_file"  # report key: the file whose existence asks this trial's workers to stop
STOP_REQUESTS = "stop_requests"  # <search folder>/stop_requests/<trial id>: those files


def stop_file(search_folder: Path, trial_id: str) -> Path:
    """The file a data-parallel trial's workers read at every evaluation: once it exists they stop."""
    return search_folder / STOP_REQUESTS / trial_id


def request_stop(path: str | Path) -> None:
    """Ask the workers watching `path` to stop at their next evaluation. An empty file, so it is
    whole the moment it exists (on the shared storage path every node reads)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).touch()
