"""The MLflow tracking store: the URI (credentials hidden in anything shown), a client checked to answer, the
races of SQLite stores (two processes creating one store's schema, an interrupt inside a transaction) and the
experiment of a name.

Everything goes through `MlflowClient` with explicit run ids (no fluent global state).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import signal
import threading
import time
import uuid

from autospeed.errors import RunFailure, UserError

_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


def redact(text: str) -> str:
    """Hide user:password in any URI inside text (tracking URIs may carry them)."""
    return _CREDENTIALS.sub(lambda m: f"{m.group('scheme')}***@", text)


def quiet_mlflow() -> None:
    """MLflow's SQL store logs schema migrations at INFO on first use, and with a tracking server
    every ended run prints "View run ... at: <url>" on stdout (one per trial); users did not ask
    for either: the search prints the server's link to its runs once, at the end."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.tracking.fluent", "mlflow.store.sql"):
        logging.getLogger(name).setLevel(logging.WARNING)


def resolve_tracking_uri(arg: str | None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else MLflow's own default."""
    import mlflow

    uri = arg or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return mlflow.get_tracking_uri()


def connect(uri: str):
    """An MlflowClient for uri, checked to answer before anything runs.

    A malformed URI is bad input (exit 2); an unreachable or unwritable store is
    a runtime failure (exit 1).
    """
    quiet_mlflow()
    from mlflow.tracking import MlflowClient

    shown = redact(uri)
    if "://" not in uri and not uri.startswith(("/", ".")) and ":" in uri:
        raise UserError(f"--tracking-uri: malformed URI '{shown}'; use e.g. sqlite:///mlflow.db or http://host:5000")
    # Fail fast on a dead server in this probe only; the search itself keeps MLflow's retries,
    # so a transient HTTP error hours into a search does not end it.
    fast = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    saved = {k: os.environ.get(k) for k in fast}
    os.environ.update({k: v for k, v in fast.items() if saved[k] is None})
    try:
        with _schema_lock(uri):  # two first-time writers of one SQLite file race on creating its tables
            _create_sqlite_whole(uri)
            client = _first_contact(lambda: MlflowClient(tracking_uri=uri))
    except Exception as e:
        first = redact(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
        if "unsupported" in first.lower() or "invalid" in first.lower() or "could not find" in first.lower():
            raise UserError(f"--tracking-uri: '{shown}' is not a usable MLflow tracking URI ({first[:200]}); "
                            f"use e.g. sqlite:///mlflow.db or http://host:5000") from None
        raise RunFailure(f"tracking store '{shown}' is unreachable ({first[:200]}); start the server or "
                         f"pass a reachable --tracking-uri") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
    return client


# What MLflow's SQL store raises when another process (`mlflow ui`, a client listing runs, a
# second search) creates or migrates the same SQLite store at the same moment: a race, not an
# unreachable store. alembic: "Online migration expected to match one row when updating ...".
_CREATION_RACE = re.compile(r"online migration expected|database is locked|already exists|"
                            r"no such table|alembic_version", re.IGNORECASE)
CREATION_RACE_ATTEMPTS = 6  # 6.3 s of back-off in all


def _first_contact(make_client, attempts: int = CREATION_RACE_ATTEMPTS):
    """A client that has answered one call. Creating the client opens the store, which creates or
    migrates a SQLite schema; both are retried while another process is doing the same."""
    for attempt in range(attempts):
        try:
            client = make_client()
            client.search_experiments(max_results=1)
            return client
        except Exception as e:
            if attempt == attempts - 1 or not _CREATION_RACE.search(str(e)):
                raise
            time.sleep(0.1 * 2 ** attempt)  # the other process finishes its migration meanwhile


def _create_sqlite_whole(uri: str) -> None:
    """A new SQLite store is created whole or not at all: MLflow creates and migrates its schema (seconds of
    migrations) in a temporary file beside it, which is synced and then linked into place, never over a store
    another process (`mlflow ui`) made meanwhile. A process killed during the migrations used to leave a store
    MLflow refuses ("out-of-date database schema") and that `mlflow db upgrade` cannot mend; now it leaves only
    a temporary file. Where the file system has no hard links, MLflow creates the store in place, as before.
    Called under _schema_lock."""
    from mlflow.tracking import MlflowClient

    from autospeed.yamlio import fsync_folder

    path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else None
    folder = os.path.dirname(os.path.abspath(path)) if path and path != ":memory:" and "?" not in path else None
    if folder is None or os.path.exists(path) or not os.path.isdir(folder):
        return
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        _first_contact(lambda: MlflowClient(tracking_uri=f"sqlite:///{tmp}"))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        # made by another process meanwhile: that one stands; no hard links here: MLflow creates it in place
        with contextlib.suppress(OSError):
            os.link(tmp, path)
        fsync_folder(folder)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def _schema_lock(uri: str):
    """For a SQLite store, an exclusive lock on its folder while MLflow creates or migrates the tables."""
    path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else None
    folder = os.path.dirname(os.path.abspath(path)) if path and path != ":memory:" else None
    if folder is None or not os.path.isdir(folder):
        yield
        return
    fd = os.open(folder, os.O_RDONLY)  # flock on the folder itself: no lock file left behind
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def experiment_id(client, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # created concurrently by another search with the same name
        return client.get_experiment_by_name(name).experiment_id



@contextlib.contextmanager
def interrupts_held():
    """Hold Ctrl-C and SIGTERM while a group of tracking writes runs, and deliver them after it.

    A KeyboardInterrupt raised inside a SQLite transaction leaves the store locked for the
    rest of the process ("database is locked"), so the interrupted runs could no longer be
    marked KILLED. Only the main thread receives signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if held:
            signal.raise_signal(held[0])  # now to the handler that was installed before
