"""A search's tracking writes, kept on disk until the tracking store has them (docs/design.md "Crash anywhere,
lose nothing").

The tracking callback never waits on MLflow. Each write (a run created, a batch of metrics, params and tags,
a tag, a status, a text artifact) is appended to a journal in the search's folder and synced; a sender thread
delivers the journal in order. While the store does not answer (a tracking server restarting, a network
partition) trials train on and the journal grows; the sender retries, and past `tracking.grace_seconds` of
silence the search stops as interrupted. A killed driver loses nothing: a resumed search sends what the
journal still holds before it reads the store.

A run created through the outbox gets a local id (`outbox-...`) at once, resolved when the store has created
it. The run carries that id as a tag, so a create sent twice (a kill between the store's answer and the
journal's note of it) finds its run instead of making a second. Every other write is idempotent (MLflow keeps
one copy of a metric logged twice with the same value, step and time).

Journal lines: {"seq": n, "op": name, "args": {...}} a write; {"created": local id, "run_id": id} the store's
id for a local one; {"sent": n} write n delivered. A file logged as an artifact is copied into the search's folder
first (FILES/<uuid>/<name>, synced), so the journal's write still has it after a kill; the copy goes once sent.

`Direct` has the same writes, straight to the store: for a caller with no search journal (`autospeed explain`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JOURNAL = "tracking_outbox.jsonl"
FILES = "tracking_outbox_files"  # beside the journal: the files its log_artifact writes send
TAG_OUTBOX_ID = "autospeed.outbox_id"  # a run created through the outbox: its local id
TAG_REFUSED = "autospeed.tracking_refused"  # on a run: how many of its writes the store refused
# Between tries while the store does not answer, then every last one: a store back (a tracking server restarted) is
# found within 2 s, and a try costs one request.
RETRY_SECONDS = (0.5, 1.0, 2.0)


@dataclass
class _Run:
    """What create_run returns: enough of MLflow's Run for `run.info.run_id`."""

    run_id: str

    @property
    def info(self) -> "_Run":
        return self


class Outbox:
    """The subset of MlflowClient's writes the tracking callback makes, journaled and sent in order."""

    def __init__(self, client, folder: Path, grace_seconds: float):
        self.client, self.path, self.grace_seconds = client, Path(folder) / JOURNAL, grace_seconds
        self._cond = threading.Condition()
        self._pending: list[dict[str, Any]] = []  # written, not yet sent, in order
        self._ids: dict[str, str] = {}  # local run id -> the store's
        self._seq = 0
        self.down_since: float | None = None  # monotonic time of the first failed try of the current outage
        self.last_error = ""
        self.outages: list[tuple[float, int]] = []  # (seconds down, writes held) of each outage that ended
        self.refused: list[str] = []  # writes the store refused (4xx): said at once, tagged, counted; not retried
        self._refused_on: dict[str, int] = {}  # run id -> its writes refused
        self._load()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held for the search's life
        self._closing = False
        self._thread = threading.Thread(target=self._send_loop, name="autospeed-outbox", daemon=True)
        self._thread.start()

    # ---- the writes (MlflowClient's signatures) ----
    def create_run(self, experiment_id: str, run_name: str | None = None, tags: dict[str, str] | None = None):
        local = f"outbox-{uuid.uuid4().hex}"
        self._put("create_run", experiment_id=experiment_id, run_name=run_name,
                  tags={**(tags or {}), TAG_OUTBOX_ID: local}, local=local)
        return _Run(local)

    def log_batch(self, run_id: str, metrics=(), params=(), tags=()) -> None:
        self._put("log_batch", run_id=run_id, metrics=[[m.key, m.value, m.timestamp, m.step] for m in metrics],
                  params=[[p.key, p.value] for p in params], tags=[[t.key, t.value] for t in tags])

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self._put("set_tag", run_id=run_id, key=key, value=str(value))

    def update_run(self, run_id: str, status: str) -> None:
        self._put("update_run", run_id=run_id, status=status)

    def set_terminated(self, run_id: str, status: str) -> None:
        self._put("set_terminated", run_id=run_id, status=status)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self._put("log_text", run_id=run_id, text=text, artifact_file=artifact_file)

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None = None) -> None:
        """`local_path` copied beside the journal (synced) before the write is journaled: the caller may delete it
        as soon as this returns."""
        kept = self.path.parent / FILES / uuid.uuid4().hex / Path(local_path).name
        kept.parent.mkdir(parents=True)
        shutil.copyfile(local_path, kept)
        with open(kept, "rb") as f:
            os.fsync(f.fileno())
        for folder in (kept.parent, kept.parent.parent, self.path.parent):  # the copy's name, to the journal's folder
            _fsync_dir(folder)
        self._put("log_artifact", run_id=run_id, local_path=str(kept), artifact_path=artifact_path)

    # ---- state ----
    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    def down_seconds(self) -> float:
        """How long the store has not answered (0 while it does)."""
        return time.monotonic() - self.down_since if self.down_since is not None else 0.0

    def past_grace(self) -> bool:
        return self.down_seconds() > self.grace_seconds

    def flush(self, timeout_seconds: float | None = None) -> bool:
        """Wait until the store has every write (True), or `timeout_seconds` passed (False)."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        with self._cond:
            while self._pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is None else min(left, 1.0))
        return True

    def unsent(self, wait_seconds: float) -> str | None:
        """Wait up to `wait_seconds` for the store to take every write: None once it has, else why the search must
        stop as interrupted (resumable: the writes stay in the journal)."""
        if self.flush(wait_seconds):
            return None
        return (f"the tracking store did not take the search's last {self.pending} writes within {wait_seconds:g} s "
                f"(last error: {self.last_error}); they are kept in {self.path} and are sent when the search resumes")

    def close(self) -> None:
        """Stop the sender (what it has not sent stays in the journal, for the next session)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=30)
        self._file.close()

    # ---- the journal ----
    def _load(self) -> None:
        """An earlier session's journal: the writes it had not sent come first, in their order. A last line cut
        short (a SIGKILL or a full disk in the middle of a write, which never returned to its caller) is cut off
        the file first: this session appends after it, and its own first write must start a line of its own."""
        if not self.path.exists():
            return
        _cut_torn_tail(self.path)
        ops, sent = [], 0
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # a torn line an earlier version left before appending to it: unreadable, skipped
                continue
            if "op" in entry:
                ops.append(entry)
            elif "created" in entry:
                self._ids[entry["created"]] = entry["run_id"]
            elif "sent" in entry:
                sent = max(sent, entry["sent"])
        self._seq = max((op["seq"] for op in ops), default=0)
        self._pending = [op for op in ops if op["seq"] > sent]

    def _append(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())  # on disk before the caller goes on (the ledger follows a final write)

    def _put(self, op: str, **args: Any) -> None:
        with self._cond:
            self._seq += 1
            entry = {"seq": self._seq, "op": op, "args": args}
            self._append(entry)
            self._pending.append(entry)
            self._cond.notify_all()

    # ---- the sender ----
    def _send_loop(self) -> None:
        tries = 0
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                entry = self._pending[0]
            try:
                self._send(entry)
            except Exception as e:  # noqa: BLE001 - every failure is either retried or said
                if _refused(e):  # the store answered no (a bad value): retrying cannot help
                    self._say_refused(entry, e)
                else:
                    self.last_error = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
                    if self.down_since is None:
                        self.down_since = time.monotonic()
                    with self._cond:
                        self._cond.wait(RETRY_SECONDS[min(tries, len(RETRY_SECONDS) - 1)])
                    tries += 1
                    continue
            with self._cond:
                if self.down_since is not None:
                    self.outages.append((self.down_seconds(), len(self._pending)))
                    self.down_since, tries = None, 0
                self._pending.pop(0)
                self._append({"sent": entry["seq"]})
                self._cond.notify_all()
            if entry["op"] == "log_artifact":  # the store has it, and the journal says so: the copy is done with
                shutil.rmtree(Path(entry["args"]["local_path"]).parent, ignore_errors=True)

    def _say_refused(self, entry: dict[str, Any], error: Exception) -> None:
        """A write the store refused is lost to the store, never silently: one line now, the count on its run
        (tag autospeed.tracking_refused, where the run exists) and in the search's closing summary (run.py)."""
        local = entry["args"].get("run_id")
        run_id = self._ids.get(local, local)
        what = f"{entry['op']}" + (f" on run {run_id}" if run_id else "")
        self.refused.append(f"{what}: {str(error).splitlines()[0][:300] if str(error) else type(error).__name__}")
        print(f"autospeed: warning: the tracking store refused a write ({self.refused[-1]}); it is kept in "
              f"{self.path} and not retried", file=sys.stderr, flush=True)
        if run_id and not run_id.startswith("outbox-"):  # a run the store created
            self._refused_on[run_id] = self._refused_on.get(run_id, 0) + 1
            with contextlib.suppress(Exception):  # a run that is gone cannot carry it: the line and count stand
                self.client.set_tag(run_id, TAG_REFUSED, str(self._refused_on[run_id]))

    def _send(self, entry: dict[str, Any]) -> None:
        from mlflow.entities import Metric, Param, RunTag

        a, c = entry["args"], self.client
        if entry["op"] == "create_run":
            self._create(a)
            return
        run_id = self._ids.get(a["run_id"], a["run_id"])
        if entry["op"] == "log_batch":
            c.log_batch(run_id, metrics=[Metric(*m) for m in a["metrics"]], params=[Param(*p) for p in a["params"]],
                        tags=[RunTag(*t) for t in a["tags"]])
        elif entry["op"] == "set_tag":
            c.set_tag(run_id, a["key"], a["value"])
        elif entry["op"] == "update_run":
            c.update_run(run_id, a["status"])
        elif entry["op"] == "set_terminated":
            c.set_terminated(run_id, a["status"])
        elif entry["op"] == "log_text":
            c.log_text(run_id, a["text"], a["artifact_file"])
        elif entry["op"] == "log_artifact":
            if os.path.exists(a["local_path"]):  # gone: sent before a kill came between the send and its note
                c.log_artifact(run_id, a["local_path"], a["artifact_path"])

    def _create(self, a: dict[str, Any]) -> None:
        local = a["local"]
        found = self.client.search_runs([a["experiment_id"]], f"tags.`{TAG_OUTBOX_ID}` = '{local}'", max_results=1)
        run_id = found[0].info.run_id if found else self.client.create_run(
            a["experiment_id"], run_name=a["run_name"], tags=a["tags"]).info.run_id
        with self._cond:
            self._ids[local] = run_id
            self._append({"created": local, "run_id": run_id})


class Direct:
    """The Outbox's writes and state, straight to the store: for a caller with no search journal (`autospeed
    explain`, a test). A write that fails raises; nothing is ever pending, the store never waited for."""

    pending, last_error, outages = 0, "", ()

    def __init__(self, client):
        self.client = client

    def create_run(self, experiment_id: str, run_name: str | None = None, tags: dict[str, str] | None = None):
        return self.client.create_run(experiment_id, run_name=run_name, tags=tags)

    def log_batch(self, run_id: str, metrics=(), params=(), tags=()) -> None:
        self.client.log_batch(run_id, metrics=metrics, params=params, tags=tags)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.client.set_tag(run_id, key, value)

    def set_terminated(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self.client.log_text(run_id, text, artifact_file)

    def log_artifact(self, run_id: str, local_path: str, artifact_path: str | None = None) -> None:
        self.client.log_artifact(run_id, local_path, artifact_path)

    def down_seconds(self) -> float:
        return 0.0

    def past_grace(self) -> bool:
        return False

    def unsent(self, wait_seconds: float) -> str | None:
        return None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _cut_torn_tail(path: Path) -> None:
    """Truncate `path` after its last newline: every write the journal holds ends with one (`_append` writes the
    line and its newline, then syncs), so bytes after the last are a write that never returned. Synced, so a
    kill right after cannot bring the torn bytes back under a later write."""
    with open(path, "rb+") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1  # 0 when no line ever completed
        if end == len(data):
            return
        f.truncate(end)
        f.flush()
        os.fsync(f.fileno())


def _refused(error: Exception) -> bool:
    """The store answered and refused the write (an HTTP 4xx: a bad value, a deleted run), as opposed to not
    answering (a connection error, a timeout, a 5xx, a locked database)."""
    from mlflow.exceptions import MlflowException

    return isinstance(error, MlflowException) and 400 <= error.get_http_status_code() < 500
