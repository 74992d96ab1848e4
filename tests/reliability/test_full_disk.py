"""A storage path that fills up in the middle of a search (docs/design.md "Crash anywhere, lose nothing").

The storage path is a small tmpfs mounted in a mount namespace of its own (`unshare -m`; every run of the
search enters it with `nsenter`), and the test fills it while a trial is held mid-training: a real full disk,
not an injected error. The search stops as interrupted (exit 130) with one line naming the path it could not
write and the fix; once there is room again, `--resume` finishes it with every trial once."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Gate, cli_env, client_for, error_lines, search_runs, wait_until, write_space

pytestmark = pytest.mark.timeout(1200)

NAME = "full"
TRIALS = 2


@pytest.fixture
def small_disk(tmp_path):
    """(holder pid, the storage path): a 16 MiB tmpfs at tmp_path/store, seen only inside the holder's mount
    namespace. The holder blocks reading its stdin, which the fixture holds open: the namespace (and the tmpfs)
    lives until the fixture closes it."""
    store, ready = tmp_path / "store", tmp_path / "mounted"
    store.mkdir()
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               'mount -t tmpfs -o size=16m tmpfs "$0" && touch "$1" && exec cat >/dev/null',
                               str(store), str(ready)], start_new_session=True, stdin=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    wait_until(lambda: ready.exists() or holder.poll() is not None, every=0.05, what="the tmpfs mounted")
    # this machine and CI's make namespaces (tests/reliability/test_cluster.py hides a folder the same way)
    assert ready.exists(), f"unshare could not mount a tmpfs in a mount namespace: {holder.stderr.read().strip()}"
    yield holder.pid, store
    holder.stdin.close()  # the holder's `cat` ends: the namespace and its tmpfs go
    with contextlib.suppress(subprocess.TimeoutExpired):
        holder.wait(30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(holder.pid, signal.SIGKILL)


def _run(pid: int, args: list[str], d: Path, env: dict[str, str], name: str) -> subprocess.Popen:
    """`autospeed ARGS` inside the holder's mount namespace, output to files."""
    with open(d / f"{name}.out", "w") as out, open(d / f"{name}.err", "w") as err:
        return subprocess.Popen(["nsenter", "-t", str(pid), "-m", "--", sys.executable, "-m", "autospeed", *args],
                                cwd=d, env=env, stdout=out, stderr=err, start_new_session=True)


def _fill(folder: Path) -> None:
    """Write into `folder` until its file system has no byte left (MiB by MiB, then page by page)."""
    with open(folder / "filler", "wb", buffering=0) as f:
        for chunk_bytes in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * chunk_bytes)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


def test_a_storage_path_that_fills_up_stops_the_search_as_interrupted_and_resume_finishes_it(
        tmp_path, small_disk, new_store):
    pid, store = small_disk
    inside = Path(f"/proc/{pid}/root{store}")  # the tmpfs, as the test (outside the namespace) sees it
    d = tmp_path
    gate = Gate(d)
    uri = new_store(d)
    write_space(d, {
        "name": NAME, **gate.workload(), "target_accuracy": 0.9,
        "budget": {"trials": TRIALS, "max_train_seconds": 600}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": 1, "repeats": 0},
        "probe": {"enabled": False},
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 1000, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.01, 0.3]}, "batch_size": {"choice": [32, 64]}},
    })
    args = ["search", "--space", str(d / "space.yaml"), "--tracking-uri", uri, "--storage-path", str(store),
            "--resume"]
    env = cli_env(pythonpath=gate.plugin_dir)
    procs = []
    try:
        first = _run(pid, args, d, env, "first")
        procs.append(first)
        wait_until(lambda: 1 in gate.waiting() or first.poll() is not None, every=0.1, what="build 1 held")
        assert first.poll() is None, (d / "first.err").read_text()
        _fill(inside)
        gate.open()  # the trials end, and what records them finds no room
        assert first.wait(300) == 130, (d / "first.out").read_text() + (d / "first.err").read_text()
        stderr = (d / "first.err").read_text()
        lines = error_lines(stderr)
        assert len(lines) == 1, stderr
        assert str(store) in lines[0], lines  # the path it could not write
        assert "No space left on device" in lines[0] or "database or disk is full" in lines[0], lines
        assert "free space" in lines[0], lines
        assert "--resume" in stderr.splitlines()[-1]  # the command that resumes it

        (inside / "filler").unlink()  # room again
        second = _run(pid, args, d, env, "second")
        procs.append(second)
        assert second.wait(300) == 0, (d / "second.out").read_text() + (d / "second.err").read_text()
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)

    parents, trials = search_runs(uri, NAME)
    assert len(parents) == 1 and len(trials) == TRIALS
    assert all(t.info.status == "FINISHED" for t in trials), [t.info.status for t in trials]
    from autospeed.search.records import audit
    from autospeed.search.storage import SearchDir

    # read from a copy: SQLite cannot open the study through /proc/PID/root
    copy = shutil.copytree(next(p for p in (inside / NAME).iterdir() if p.is_dir()), d / "search-copy")
    folder = SearchDir(Path(copy))
    records = audit(folder, NAME, client_for(uri), parents[0].info.run_id)
    assert records.agree and len(records.ledger) == TRIALS, records.describe()
