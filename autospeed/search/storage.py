"""The search's own files on disk, under the storage path.

    <storage_path>/<name>/<search_id>/                  Ray Tune experiment (Tuner.restore reads it)
    <storage_path>/<name>/<search_id>/optuna.db         Optuna study (optuna.load_study / optuna-dashboard)
    <storage_path>/<name>/<search_id>/autospeed_search.state  search id, parent run, space, trials, seed (JSON)
    <storage_path>/<name>/<search_id>/finished/<trial id>.json  ledger: trials whose MLflow run is final
    <storage_path>/<name>/<search_id>/recipes/<recipe key>.json the first trial of each recipe, its result
    <storage_path>/<name>/<search_id>/best.yaml         the search's best recipe (as `autospeed export`)
    <storage_path>/<name>/.search.lock                  held by the running search of that name (search_lock)

Trials read the ledger and the recipe index, so on a cluster the storage path must be
one that every node sees (docs/design.md "Scale-out").
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autospeed.errors import RunFailure, UserError
from autospeed.yamlio import write_atomic

DEFAULT_STORAGE = "autospeed_results"
# JSON, but not named *.json: on a restore Ray Tune copies every top-level *.json of the experiment folder to its
# staging folder and uploads that copy back now and then, over the live file (a state rolled back, and a kill
# mid-copy left it empty: seen once in the kill-anywhere test). Searches started before keep their old name.
STATE_FILE, OLD_STATE_FILE = "autospeed_search.state", "autospeed_search.json"
_LEDGER_ONLY = ("baseline", "history")  # ledger keys that are not part of a trial's final report


def search_root(storage_path: str | None, name: str) -> Path:
    """The folder holding every search named `name`."""
    return Path(storage_path or DEFAULT_STORAGE).expanduser().resolve() / name


LOCK_FILE = ".search.lock"


@contextlib.contextmanager
def search_lock(root: Path, name: str):
    """Hold the lock of the searches named `name` under this storage path while the block runs; refuse (UserError,
    exit 2) while another process holds it. The lock is the kernel's (flock) on `root/.search.lock`: it goes with
    its process however that ends, SIGKILL included, so a stale lock is never left to detect. The file says who
    holds it (host, pid, since), for the line a second search prints."""
    path = root / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"search '{name}': another search of this name is running on this storage path "
                            f"({_lock_owner(path)}); wait for it to end, or give this one another --name "
                            f"(or --storage-path)") from None
        owner = {"host": socket.gethostname(), "pid": os.getpid(),
                 "since": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _lock_owner(path: Path) -> str:
    try:
        owner = json.loads(path.read_text())
        return f"host {owner['host']}, pid {owner['pid']}, since {owner['since']}"
    except (OSError, ValueError, KeyError):
        return f"its lock: {path}"


def check_writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise RunFailure(f"--storage-path: cannot write to {root} ({e.strerror}); pick a writable folder") from None


def unwritable(error: OSError) -> str:
    """One line for a write the storage refused (ENOSPC, EROFS, EDQUOT...): what, where, and the fix."""
    where = error.filename or "the search's folder"
    return (f"cannot write {where}: {error.strerror or error}; free space there (or make it writable), "
            f"then resume the search")


def write_refused(error: BaseException, study: Path) -> str | None:
    """unwritable()'s line when `error` (or what caused it) is a write the disk refused: no space, no quota, a
    read-only file system, or SQLite's "database or disk is full" (Optuna's study at `study`); None for anything
    else."""
    import errno

    seen = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            return unwritable(seen)
        if "database or disk is full" in str(seen):
            return f"cannot write {study}: database or disk is full; free space there, then resume the search"
        seen = seen.__cause__ or seen.__context__
    return None


def recipe_key(training_fields: dict[str, Any]) -> str:
    """Identity of a recipe: every training field (seed included), hashed."""
    return hashlib.sha256(json.dumps(training_fields, sort_keys=True, default=str).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class SearchDir:
    """One search's folder and the files in it."""

    path: Path

    @property
    def state_file(self) -> Path:
        return self.path / STATE_FILE

    @property
    def optuna_url(self) -> str:
        return f"sqlite:///{self.path / 'optuna.db'}"

    @property
    def best_yaml(self) -> Path:
        return self.path / "best.yaml"

    def read_state(self) -> dict[str, Any]:
        path = self.state_file if self.state_file.exists() else self.path / OLD_STATE_FILE
        return json.loads(path.read_text())

    def write_state(self, state: dict[str, Any]) -> None:
        write_atomic(self.state_file, json.dumps(state, indent=2))

    # ---- the ledger: one JSON per trial whose MLflow run is final ----
    def ledger(self, trial_id: str) -> Path:
        return self.path / "finished" / f"{trial_id}.json"

    def finished(self, trial_id: str) -> dict[str, Any] | None:
        """The final report Tune got from a finished trial (what a restarted trial hands Tune again)."""
        path = self.ledger(trial_id)
        if not path.exists():
            return None
        entry = json.loads(path.read_text())
        return {k: v for k, v in entry.items() if k not in _LEDGER_ONLY}

    def finished_ids(self) -> list[str]:
        """Trial ids the ledger holds."""
        return [p.stem for p in (self.path / "finished").glob("*.json")]

    def record_finished(self, trial_id: str, final_report: dict[str, Any], *, baseline: bool = False,
                        history: list[tuple[float, float]] = ()) -> None:
        """`history`: the trial's (train_seconds, target metric) reports, in order, for ASHA's rungs."""
        write_atomic(self.ledger(trial_id), json.dumps({**final_report, "baseline": baseline,
                                                        "history": [list(h) for h in history]}))

    def histories(self) -> list[tuple[str, bool, list[tuple[float, float]]]]:
        """(trial id, baseline, its reports' (train_seconds, target metric)) of every finished trial,
        in the order they finished: what a resumed search's ASHA refills its rungs from."""
        out = []
        for path in sorted((self.path / "finished").glob("*.json"), key=lambda p: p.stat().st_mtime_ns):
            entry = json.loads(path.read_text())
            out.append((path.stem, bool(entry.get("baseline")), [tuple(h) for h in entry.get("history", [])]))
        return out

    def incumbent_high_seconds(self, keep: int = 1) -> float | None:
        """The `keep`-th best finished non-baseline trial's TTA, or its predicted high bound (None: fewer
        finished): a trial whose predicted low bound is above it cannot be among the `keep` best."""
        folder = self.path / "finished"
        if not folder.is_dir():
            return None
        highs = []
        for path in folder.glob("*.json"):
            entry = json.loads(path.read_text())
            high = entry.get("tta_seconds") or entry.get("tta_predicted_high_seconds")
            if not entry.get("baseline") and high:
                highs.append(high)
        return sorted(highs)[keep - 1] if len(highs) >= keep else None

    def exponents(self) -> list[float]:
        """The error exponents (autospeed.horizon) of the finished trials that measured one, for the next trial
        to pool with its own."""
        folder = self.path / "finished"
        if not folder.is_dir():
            return []
        from autospeed.horizon import EXPONENT_KEY

        values = (json.loads(path.read_text()).get(EXPONENT_KEY) for path in folder.glob("*.json"))
        return [float(v) for v in values if isinstance(v, (int, float))]

    # ---- the recipe index: the first trial of each recipe and its outcome ----
    def _recipe_file(self, key: str) -> Path:
        return self.path / "recipes" / f"{key}.json"

    def first_of_recipe(self, key: str) -> dict[str, Any] | None:
        path = self._recipe_file(key)
        return json.loads(path.read_text()) if path.exists() else None

    def record_recipe(self, key: str, outcome: dict[str, Any]) -> None:
        if not self._recipe_file(key).exists():
            write_atomic(self._recipe_file(key), json.dumps(outcome))


def latest_search_dir(storage_path: str | None, name: str) -> SearchDir | None:
    """The most recently started search named `name` under the storage path."""
    root = search_root(storage_path, name)
    states = sorted([*root.glob(f"*/{STATE_FILE}"), *root.glob(f"*/{OLD_STATE_FILE}")], key=lambda p: p.stat().st_mtime)
    return SearchDir(states[-1].parent) if states else None
