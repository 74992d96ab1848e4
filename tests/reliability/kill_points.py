"""`autospeed ARGS`, SIGKILLed at one named point of its driver: the kill-anywhere test's hook.

    python kill_points.py POINT N -- search --space s.yaml ...

The driver kills itself (SIGKILL: no handler, no clean-up) the Nth time it passes POINT. Each point
wraps a real function of the driver and changes nothing else, so the disk, the study and the
tracking store hold exactly what they hold at that instant of a real kill.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from pathlib import Path

POINTS = {
    "start": "run_search entered: nothing written yet",
    "store_migration": "MLflow creating a new SQLite store, halfway through its schema migrations",
    "state_written": "the search's state file written, its MLflow parent run not yet created",
    "trial_run_created": "a trial's MLflow run created, before the trial trains",
    "trial_result": "a trial's evaluation logged, the trial in the middle of training",
    "mlflow_final": "a trial's MLflow run final, its ledger entry not yet written",
    "ledger_rename": "a ledger entry's temporary file written, not yet renamed into place",
    "before_tell": "a trial in the ledger, the Optuna study not yet told",
    "tune_state_copy": "inside Ray Tune's copy of its experiment state (the first after N - 1 trials finished in "
                       "the run): a state file cut short",
    "production_run": "a confirmation or ablation run opened (RUNNING), before it trains: the Nth such run the "
                      "driver trains (confirmation's come first, then the ablation's)",
}


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _after(n: int, fn, *, before: bool = False, when=lambda *a, **k: True):
    """`fn`, with a SIGKILL before or after its Nth call that `when` accepts."""
    seen = [0]

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        hit = when(*args, **kwargs)
        if hit:
            seen[0] += 1
        if hit and before and seen[0] == n:
            _die()
        out = fn(*args, **kwargs)
        if hit and not before and seen[0] == n:
            _die()
        return out
    return wrapped


def install(point: str, n: int) -> None:
    from autospeed.search import callback, storage, tuner

    if point == "start":
        import autospeed.search

        autospeed.search.run_search = _after(n, autospeed.search.run_search, before=True)
    elif point == "store_migration":  # a new store takes ~1700 SQL statements to create: die after 800 of them
        import sqlalchemy

        statements = [0]

        @sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "after_cursor_execute")
        def counted(*_):
            statements[0] += 1
            if statements[0] == 800 * n:
                _die()
    elif point == "state_written":
        storage.SearchDir.write_state = _after(n, storage.SearchDir.write_state)
    elif point == "trial_run_created":
        callback.TrialTracker.on_trial_start = _after(n, callback.TrialTracker.on_trial_start)
    elif point == "trial_result":
        callback.TrialTracker.on_trial_result = _after(
            n, callback.TrialTracker.on_trial_result,
            when=lambda *a, **k: (k["result"] if "result" in k else a[4]).get("final") is False)
    elif point == "mlflow_final":
        storage.SearchDir.record_finished = _after(n, storage.SearchDir.record_finished, before=True)
    elif point == "ledger_rename":
        real, seen = storage.write_atomic, [0]

        def write(path, text):
            path = Path(path)
            if path.parent.name == "finished":
                seen[0] += 1
                if seen[0] == n:  # atomic_path's temporary file, written; the rename never comes
                    (path.parent / f".{path.name}.killed.tmp").write_text(text)
                    _die()
            return real(path, text)
        storage.write_atomic = write
    elif point == "before_tell":
        tuner.LedgerFirstOptuna.tell = _after(n, tuner.LedgerFirstOptuna.tell, before=True,
                                              when=lambda searcher, trial_id: trial_id in searcher._untold)
    elif point == "tune_state_copy":  # the first copy of Tune's state after N - 1 trials finished in this run
        import ray.train._internal.storage as ray_storage

        real_upload, real_record, finished = ray_storage._upload_to_fs_path, storage.SearchDir.record_finished, [0]

        def record(self, *args, **kwargs):
            real_record(self, *args, **kwargs)
            finished[0] += 1

        def upload(local_path, fs, fs_path, exclude=None):
            real_upload(local_path=local_path, fs=fs, fs_path=fs_path, exclude=exclude)
            states = sorted(Path(fs_path).glob("experiment_state-*.json"))
            if os.path.isdir(local_path) and states and finished[0] >= n - 1:
                # as if the kill came halfway through copying the state file over the old one
                data = states[-1].read_bytes()
                with open(states[-1], "r+b") as f:
                    f.truncate(len(data) // 2)
                _die()
        storage.SearchDir.record_finished = record
        ray_storage._upload_to_fs_path = upload
    elif point == "production_run":
        from autospeed.search import confirm_sample

        confirm_sample.train_like_production = _after(n, confirm_sample.train_like_production, before=True)
    else:
        raise SystemExit(f"kill_points.py: unknown point {point!r}; one of {', '.join(POINTS)}")


if __name__ == "__main__":
    point, n, sep, *args = sys.argv[1:]
    assert sep == "--", "usage: kill_points.py POINT N -- AUTOSPEED ARGS"
    install(point, int(n))
    from autospeed.cli import main

    sys.exit(main(args))
