"""Scale-out for real: a search on a 2-node Ray cluster with an MLflow tracking server.

The `cluster` fixture starts what a user would (`ray start --head`, a second `ray start
--address`, `mlflow server` with a SQLite backend and artifact proxying) on this machine with
ephemeral ports (the MLflow server on 127.0.0.1; Ray binds its nodes to the machine's own address
even when told 127.0.0.1), each node with one CPU and its own temp dir, and tears down exactly the
processes it started (each was started in its own session; never a global `ray stop`).
The second node runs in its own mount namespace, where one folder (`hidden`) is an empty tmpfs:
a storage path that only the head node sees (hide_folder.py: libc's unshare and mount through ctypes, no
`unshare` binary needed). Where the kernel refuses the namespaces, the storage check cannot run: it skips with
the kernel's refusal in its reason and a warning in the run's summary; test_hide_folder.py checks the launcher.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from .conftest import Gate, autospeed, cli_env, error_lines, free_port, sigkill_with_state_whole, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

NAME = "on-a-cluster"
TRIALS = 4
RAY = str(Path(sys.executable).with_name("ray"))



HIDE = str(Path(__file__).with_name("hide_folder.py"))


def _why_no_folder_can_be_hidden() -> str | None:
    """None when this machine lets a user start a process in its own user and mount namespace, else the
    kernel's refusal."""
    with tempfile.TemporaryDirectory() as d:
        try:
            done = subprocess.run([sys.executable, HIDE, d, "true"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return str(e)
        return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["no output"])[-1]


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (session id, parent pid) of every live process (Linux /proc). A zombie (state Z: it has
    ended, its parent has not reaped it yet) is not live: nothing is left to kill or wait for."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError):
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session
                if fields[0] != "Z":
                    out[int(entry)] = (int(fields[3]), int(fields[1]))
    return out


def _kill_sessions(sids: list[int]) -> None:
    """End every process of these sessions (each a `ray start` or `mlflow server` and what it left
    running) and their descendants (Ray's workers), and nothing else."""
    def ours() -> set[int]:
        procs = _processes()
        found = {pid for pid, (sid, _) in procs.items() if sid in sids}
        grew = True
        while grew:  # descendants, wherever their session
            more = {pid for pid, (_, ppid) in procs.items() if ppid in found} - found
            found |= more
            grew = bool(more)
        return found

    # SIGKILL: all go at once (Ray's gcs_server does not leave within 15 s of a SIGTERM, and nothing here needs a
    # clean exit: the cluster's files go with its temp dirs). Each is waited on through a pidfd, which becomes
    # readable when the process has ended (opened before the kill: no other process can take its pid meanwhile);
    # the 15 s only guard against a hang.
    fds = []
    for pid in ours():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            fds.append(os.pidfd_open(pid))
            signal.pidfd_send_signal(fds[-1], signal.SIGKILL)
    ended = select.poll()
    for fd in fds:
        ended.register(fd, select.POLLIN)
    deadline = time.monotonic() + 15
    try:
        while fds and time.monotonic() < deadline:
            for fd, _ in ended.poll(max(0, 1000 * (deadline - time.monotonic()))):
                ended.unregister(fd)
                fds.remove(fd)
                os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)


@dataclass
class Cluster:
    address: str
    uri: str
    gate: Gate
    env: dict[str, str]
    shared: Path  # every node sees it
    hidden: Path | None  # only the head node sees it (None: this machine cannot hide a folder)
    why_not_hidden: str | None  # the kernel's refusal, when hidden is None
    dir: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, new_store):
    base = tmp_path_factory.mktemp("cluster")
    gate = Gate(base)  # the gated plugin workload, importable on both nodes through PYTHONPATH
    temp = Path(tempfile.mkdtemp(prefix="as-ray-"))  # short: Ray's session folders hold unix sockets
    why_not_hidden = _why_no_folder_can_be_hidden()
    hidden = base / "head-only" if why_not_hidden is None else None
    if hidden is not None:
        hidden.mkdir()
    env = cli_env(pythonpath=gate.plugin_dir)
    env.pop("MLFLOW_HTTP_REQUEST_MAX_RETRIES")  # a busy server gets MLflow's own retries, as a user's would
    env.pop("RAY_ADDRESS", None)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # Ray 2.60 turns token authentication on for a head node when ~/.ray/auth_token exists, and a
    # joining node or driver must then be given the token: on loopback, off for every process here.
    env["RAY_AUTH_MODE"] = "disabled"
    sessions: list[int] = []

    def start(args: list[str], log: Path, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(log, "w") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env={**env, **(extra_env or {})},
                                    cwd=base, start_new_session=True)
        sessions.append(proc.pid)
        return proc

    def node(*extra: str) -> list[str]:
        return ["start", "--num-cpus", "1", "--num-gpus", "0", "--disable-usage-stats",
                "--min-worker-port", "0", "--max-worker-port", "0",
                "--dashboard-agent-listen-port", str(free_port()), *extra]

    server = None
    try:
        # The tracking server starts first and comes up while the Ray nodes do. Its backend is an empty,
        # already-created store (no schema creation: first contact is not what this file tests), and
        # it runs no MLflow server jobs (MLflow 3 starts seven `huey` job consumers for its GenAI
        # features, each as heavy as the server): tracking, artifacts and the UI stay as a user's.
        port = free_port()
        server = start([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", new_store(base),
                        "--artifacts-destination", str(base / "artifacts"),
                        "--serve-artifacts", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                       base / "mlflow.log", {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        uri = f"http://127.0.0.1:{port}"

        head = start([RAY, *node("--head", "--port", "0", "--include-dashboard", "false",
                                 "--temp-dir", str(temp / "head"))],
                     base / "ray-head.log")
        assert head.wait(300) == 0, (base / "ray-head.log").read_text()
        address = (temp / "head" / "ray_current_cluster").read_text().strip()
        second = [RAY, *node("--address", address, "--temp-dir", str(temp / "node2"))]
        if hidden is not None:  # the second node's view of `hidden` is an empty tmpfs
            second = [sys.executable, HIDE, str(hidden), *second]
        joined = start(second, base / "ray-node2.log")
        # `ray start` returns once its node is registered with the head's GCS: both nodes are in the cluster
        assert joined.wait(300) == 0, (base / "ray-node2.log").read_text()

        def answers() -> bool:
            assert server.poll() is None, (base / "mlflow.log").read_text()
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{uri}/health", timeout=5) as r:
                return r.status == 200
            return False
        wait_until(answers, every=0.2, what="mlflow server")
        yield Cluster(address, uri, gate, env, base / "store", hidden, why_not_hidden, base)
    finally:
        _kill_sessions(sessions)
        shutil.rmtree(temp, ignore_errors=True)


def _space(c: Cluster) -> Path:
    """Every trial has a gate (GATED_PLUGIN): held in the middle of training until the test opens it."""
    path = c.dir / "space.yaml"
    path.write_text(yaml.safe_dump({
        "name": NAME, **c.gate.workload(), "target_accuracy": 0.9,
        "budget": {"trials": TRIALS, "max_train_seconds": 600}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "confirm": {"top_k": 1, "repeats": 0},
        "probe": {"enabled": False},  # its model builds would pass the gates the test counts on
        "resources": {"gpus_per_trial": 0, "cpus_per_trial": 1, "max_concurrent_trials": 2},
        "baseline": {"batch_size": 32, "lr": 0.05}, "fixed": {"epochs": 1000, "eval_every_epochs": 1},
        "space": {"lr": {"loguniform": [0.01, 0.3]}, "batch_size": {"choice": [32, 64]}},
    }, sort_keys=False))
    return path


def _args(c: Cluster, storage: Path, *extra: str) -> list[str]:
    return ["search", "--space", str(_space(c)), "--tracking-uri", c.uri, "--storage-path", str(storage),
            "--ray-address", c.address, *extra]


def _trial_runs(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(NAME)
    if exp is None:
        return []
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get("autospeed.kind") == "trial"]


def _parents(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(NAME)
    runs = client.search_runs([exp.experiment_id], max_results=1000) if exp else []
    return [r for r in runs if r.data.tags.get("autospeed.kind") == "search"]


def test_a_storage_path_one_node_cannot_see_fails_before_any_trial(cluster):
    if cluster.hidden is None:  # said loudly: a skip alone reads as a pass in `pytest -q`
        why = (f"NOT TESTED: a storage path one node cannot see; this kernel refuses an unprivileged user and mount "
               f"namespace ({cluster.why_not_hidden})")
        warnings.warn(why, pytest.PytestWarning)
        pytest.skip(why)
    p = autospeed(*_args(cluster, cluster.hidden), cwd=cluster.dir, env=cluster.env)
    assert p.returncode == 1, p.stdout + p.stderr
    (line,) = error_lines(p.stderr)
    assert "--storage-path" in line and str(cluster.hidden) in line
    assert "not visible on 1 of the cluster's 2 nodes" in line
    assert "Traceback" not in p.stderr
    assert _trial_runs(cluster.uri) == [] and _parents(cluster.uri) == []  # nothing started


def test_a_search_on_two_nodes_with_a_tracking_server_survives_a_sigkill(cluster, start_cli, cli_in_process):
    """Trials run on both nodes (their node tags differ), one child run per trial, export and
    report work, no MLflow "View run" lines, and a SIGKILL of the driver followed by --resume
    loses no finished trial. Each step waits for the state it needs (the gates), never a clock."""
    c, gate = cluster, cluster.gate
    args = _args(c, c.shared)
    first = start_cli(*args, cwd=c.dir, env=c.env)

    # Builds 1 and 2 held at their gates at once: two trials running, one CPU per node, so one per node.
    gate.wait_for(1, first)
    gate.wait_for(2, first)

    def held_runs(n: int):
        running = [r for r in _trial_runs(c.uri) if r.info.status == "RUNNING"
                   and "val_accuracy" in r.data.metrics and "autospeed.env.node" in r.data.tags]
        return running if len(running) == n else None
    both = wait_until(lambda: held_runs(2), what="two trial runs, evaluated, with their node tags")
    assert len({r.data.tags["autospeed.env.node"] for r in both}) == 2  # two Ray nodes

    # Let them finish; the next two trials (builds 3 and 4) are held in the middle of training.
    gate.open(1, 2)
    gate.wait_for(3, first)
    gate.wait_for(4, first)

    def state_to_kill():
        runs = _trial_runs(c.uri)
        done = [r for r in runs if r.info.status == "FINISHED"]
        running = [r for r in runs if r.info.status == "RUNNING" and "val_accuracy" in r.data.metrics]
        return (done, running) if len(done) == 2 and len(running) == 2 else None
    done, running = wait_until(state_to_kill, what="2 finished trial runs and 2 in the middle of training")
    assert len({r.data.tags["autospeed.env.node"] for r in running}) == 2
    kept = {r.info.run_id: (r.info.end_time, len(r.data.metrics)) for r in done}

    sigkill_with_state_whole(first, next(d for d in (c.shared / NAME).iterdir() if d.is_dir()), whole_group=False)
    first.wait()
    assert "View run" not in first.stdout + first.stderr

    gate.open()
    resumed = autospeed(*args, "--resume", cwd=c.dir, env=c.env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert not error_lines(resumed.stderr)
    trials = _trial_runs(c.uri)
    assert not [r for r in trials if r.info.status == "RUNNING"]
    finished = {r.info.run_id: (r.info.end_time, len(r.data.metrics)) for r in trials if r.info.run_id in kept}
    assert finished == kept  # no finished trial lost or trained again
    assert gate.builds() == 6  # only the two trials killed in the middle of training trained again
    ended = [r for r in trials if r.data.tags["autospeed.status"] != "killed"]
    assert len(ended) == TRIALS and len({r.data.tags["autospeed.trial_id"] for r in ended}) == TRIALS
    assert {r.data.tags["autospeed.status"] for r in ended} == {"reached"}
    assert all(r.info.status == "KILLED" for r in trials if r not in ended)
    (parent,) = _parents(c.uri)
    assert parent.info.status == "FINISHED"

    # The tracking server: no per-run "View run" lines, and the closing hint links the server's page.
    assert "View run" not in resumed.stdout and "--backend-store-uri http" not in resumed.stdout
    assert f"compare trials: {c.uri}/#/experiments/{parent.info.experiment_id}/" in resumed.stdout
    assert "trials ran on 2 nodes" in resumed.stdout  # the leaderboard says so

    # export and report only read (and log to) the tracking server: through the CLI's entry point, in process
    out = c.dir / "best.yaml"
    export = cli_in_process("export", "--name", NAME, "--tracking-uri", c.uri, "--out", str(out))
    assert export.returncode == 0, export.stderr
    assert yaml.safe_load(out.read_text())["measured"]["environment"]["node"] in {
        r.data.tags["autospeed.env.node"] for r in ended}
    report = cli_in_process("report", "--name", NAME, "--tracking-uri", c.uri, "--out", str(c.dir / "report"))
    assert report.returncode == 0, report.stderr
    assert "trials ran on 2 nodes" in (c.dir / "report" / "report.html").read_text()
