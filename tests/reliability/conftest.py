"""Fault injection for real: the CLI in a subprocess, signals, plugin workloads that fail."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

FAULTY_PLUGIN = '''
"""A workload that fails on purpose: CUDA OOM above a batch size, NaN at one batch size."""
import os
import torch
from torch import nn
from autospeed.workloads import Workload


class Net(nn.Module):
    def __init__(self, oom_above, nan_batch, marker):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.oom_above, self.nan_batch, self.marker = oom_above, nan_batch, marker

    def forward(self, x):
        if self.training and x.shape[0] > self.oom_above:
            with open(self.marker, "a") as f:  # one line per OOM: a retry would add another
                f.write(f"{os.getpid()} {x.shape[0]}\\n")
            # Sizes in the message differ per batch size, as real CUDA OOMs do.
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {x.shape[0] / 64:.2f} GiB")
        out = self.body(x)
        if self.training and x.shape[0] == self.nan_batch:
            out = out * float("nan")
        return out


def faulty(oom_above=64, nan_batch=9, marker="/dev/null"):
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(4, 16, generator=g) * 3
    y = torch.randint(0, 4, (512,), generator=g)
    x = centers[y] + torch.randn(512, 16, generator=g)
    return Workload(name="faulty", train_x=x[:384], train_y=y[:384], val_x=x[384:], val_y=y[384:],
                    build_model=lambda: Net(oom_above, nan_batch, marker), num_classes=4)
'''


GATED_PLUGIN = r'''
"""A workload whose runs stay in the middle of training until the test opens their gate.

A test that interrupts a trial must interrupt one that is training, however fast or
slow the machine: it never waits a while and hopes. Each model build (one per
trained run) is numbered from 1 in builds.log, across every process of the test
(searches, resumes, Ray workers, the CLI's confirmation runs). A build whose gate is
closed trains on, slowly (a short sleep per step) and evaluating as usual, but its
evaluations score ~0.25 (the model answers class 0): it cannot reach the target, so
it does not end (the tests give it epochs and a budget far beyond their timeouts).
After its first evaluation (`evaluations`: 0 for its first step) it writes
"<build> <pid> <seed>" to waiting.log: from then on it is a run in the middle of
training, its results reported, and it stays one until the test creates open-<build>
(or `open`, for every build). Then it reaches the target at its next evaluation and
ends. An open build reaches it at its first evaluation.

Only builds whose seed (the recipe's: the trainer seeds torch before it builds the
model) is >= gate_from_seed have a gate; the others are open.
"""
import fcntl
import os
import time

import torch
from torch import nn
from autospeed.workloads import Workload

STEP_SECONDS = 0.05  # per training step behind a closed gate: a few evaluations a second


def _append(path, line):
    """Append one line under a lock; return its number (1-based)."""
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = sum(1 for _ in f) + 1
        f.write(line.format(n=n) + "\n")
        f.flush()
        return n


class Gated(nn.Module):
    def __init__(self, gate_dir, gate_from_seed, evaluations):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.gate_dir, self.seed = gate_dir, torch.initial_seed()
        self.build = _append(os.path.join(gate_dir, "builds.log"), f"{{n}} {os.getpid()} {self.seed}")
        self.has_gate, self.evaluations, self.announced = self.seed >= gate_from_seed, evaluations, False

    def closed(self):
        if self.has_gate and not any(os.path.exists(os.path.join(self.gate_dir, name))
                                     for name in (f"open-{self.build}", "open")):
            return True
        self.has_gate = False  # opened: for good
        return False

    def forward(self, x):
        out = self.body(x)
        if not self.closed():
            return out
        if not self.training:
            self.evaluations -= 1
            answer = out.new_zeros(out.shape)
            answer[:, 0] = 1.0  # class 0, whatever the input
            return answer
        if self.evaluations <= 0 and not self.announced:
            self.announced = True
            _append(os.path.join(self.gate_dir, "waiting.log"), f"{self.build} {os.getpid()} {self.seed}")
        time.sleep(STEP_SECONDS)  # a plain sleep: Ctrl-C, SIGTERM and Ray's stop get through
        return out


def gated(gate_dir, gate_from_seed=0, evaluations=1):
    """Four well-separated blobs in 16-D: an open run reaches 0.9 at its first evaluation."""
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(4, 16, generator=g) * 3
    y = torch.randint(0, 4, (512,), generator=g)
    x = centers[y] + torch.randn(512, 16, generator=g)
    return Workload(name="gated", train_x=x[:384], train_y=y[:384], val_x=x[384:], val_y=y[384:],
                    build_model=lambda: Gated(gate_dir, gate_from_seed, evaluations), num_classes=4)
'''



# The tests send Ctrl-C as a terminal does, to a foreground job. A pytest started in the background
# (`pytest &` in a script, nohup) inherits SIGINT *ignored*, passes that on to every process it starts,
# and Python then installs no KeyboardInterrupt handler in them: each Ctrl-C would be lost. A handler
# here (not SIG_IGN) makes the CLI processes start with SIGINT's default action, as in a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_env(extra: dict[str, str] | None = None, pythonpath: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", **(extra or {})}
    env.pop("MLFLOW_TRACKING_URI", None)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), os.environ.get("PYTHONPATH")]))
    return env


def autospeed(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 540):
    """`python -m autospeed ARGS` to completion: CompletedProcess with text stdout/stderr.
    `timeout` only guards against a hang: a search on a busy 2-core machine takes minutes."""
    return subprocess.run([sys.executable, "-m", "autospeed", *args], cwd=cwd, env=env or cli_env(),
                          capture_output=True, text=True, timeout=timeout)


class Running:
    """A CLI process in its own session (like a terminal's foreground job), output to files."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]):
        self.out, self.err = cwd / f"out-{time.monotonic_ns()}.txt", cwd / f"err-{time.monotonic_ns()}.txt"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "autospeed", *args], cwd=cwd, env=env,
                                         stdout=out, stderr=err, start_new_session=True)

    def ctrl_c(self) -> None:
        """What Ctrl-C in a terminal does: SIGINT to the whole foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def wait(self, timeout: float = 300) -> int:
        return self.proc.wait(timeout)

    @property
    def stdout(self) -> str:
        return self.out.read_text()

    @property
    def stderr(self) -> str:
        return self.err.read_text()

    def reap(self) -> None:
        """Kill what is left of this process group (Ray processes orphaned by a SIGKILL)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


@pytest.fixture
def start_cli():
    started: list[Running] = []

    def start(*args: str, cwd: Path, env: dict[str, str]) -> Running:
        started.append(Running(list(args), cwd, env))
        return started[-1]

    yield start
    for r in started:
        r.reap()


def write_space(folder: Path, spec: dict, name: str = "space.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def write_plugin(folder: Path) -> Path:
    (folder / "faulty_plugin.py").write_text(textwrap.dedent(FAULTY_PLUGIN))
    return folder


class Gate:
    """The test's side of GATED_PLUGIN: which model builds are held at their gate, and opening gates."""

    def __init__(self, folder: Path):
        (folder / "gated_plugin.py").write_text(textwrap.dedent(GATED_PLUGIN))
        self.plugin_dir, self.dir = folder, folder / "gate"
        self.dir.mkdir()

    def workload(self, **options) -> dict:
        """The search-space keys that select the gated workload."""
        return {"workload": "gated_plugin:gated", "workload_options": {"gate_dir": str(self.dir), **options}}

    def open(self, *builds: int) -> None:
        """Open these builds' gates (before or after they are built); no build: every gate, for good."""
        for name in [f"open-{b}" for b in builds] or ["open"]:
            (self.dir / name).touch()

    def builds(self) -> int:
        log = self.dir / "builds.log"
        return len(log.read_text().splitlines()) if log.exists() else 0

    def waiting(self) -> list[int]:
        """Builds that were held at their closed gate after their first evaluation (opened since or not)."""
        log = self.dir / "waiting.log"
        return [int(line.split()[0]) for line in log.read_text().splitlines()] if log.exists() else []

    def wait_for(self, build: int, proc: Running) -> None:
        """Until build `build` is held at its closed gate: in the middle of training, and staying there."""
        wait_until(lambda: build in self.waiting() or proc.proc.poll() is not None, every=0.1,  # a file: cheap
                   what=f"build {build} held")
        assert proc.proc.poll() is None, proc.stdout + proc.stderr


class Server:
    """`mlflow server` with a SQLite backend and proxied artifacts, stopped and started on one port."""

    def __init__(self, d: Path, backend: str):
        self.d, self.backend, self.port = d, backend, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.d / "mlflow.log", "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend,
                 "--artifacts-destination", str(self.d / "artifacts"), "--serve-artifacts", "--host", "127.0.0.1",
                 "--port", str(self.port), "--workers", "1"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.d, start_new_session=True,
                env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        wait_until(self.answers, every=0.2, what="mlflow server up")

    def answers(self) -> bool:
        assert self.proc.poll() is None, (self.d / "mlflow.log").read_text()[-3000:]
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.uri}/health", timeout=5) as r:
            return r.status == 200
        return False

    def stop(self) -> None:
        """The whole server (its workers too) gone: nothing answers on the port."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)

        def refused() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) != 0
        wait_until(refused, every=0.1, what="the server's port closed")


@pytest.fixture
def server(tmp_path, new_store):
    s = Server(tmp_path, new_store(tmp_path / "backend"))
    s.start()
    yield s
    with contextlib.suppress(Exception):
        s.stop()


def client_for(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def search_runs(uri: str, name: str) -> tuple[list, list]:
    """(parent runs, trial child runs) of experiment `name`, oldest first."""
    c = client_for(uri)
    exp = c.get_experiment_by_name(name)
    if exp is None:
        return [], []
    runs = c.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("autospeed.kind") == "search"]
    trials = [r for r in runs if r.data.tags.get("autospeed.kind") == "trial"]
    return parents, trials


def wait_until(predicate, timeout: float = 300, every: float = 0.5, what: str = "condition"):
    """Poll until `predicate()` is true (returned); `timeout` only guards against a hang."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("autospeed: error:")]


def state_whole(exp_dir: Path) -> bool:
    """Whether Ray Tune's saved state in the search's folder is whole (records.tune_state_problem: every file
    of Tune's a JSON document or a complete pickle). Tune rewrites them in place several times a second (a
    copy from its staging folder), so a file can be cut short by a SIGKILL that lands during the copy."""
    from autospeed.search.records import tune_state_problem

    return tune_state_problem(exp_dir) is None


def sigkill_with_state_whole(proc: "Running", exp_dir: Path, whole_group: bool) -> None:
    """SIGKILL the search, at a moment when Ray Tune's saved state is whole.

    A SIGKILL in the middle of Tune's copy of its state leaves a file cut short, and --resume then
    rebuilds the search from its own records instead of restoring Tune's state: what
    test_kill_anywhere.py tests, not the tests that call this. So the driver is paused (SIGSTOP) and
    killed only while every state file is whole; otherwise it runs on a moment and is paused again."""

    def paused_with_state_whole():
        os.kill(proc.proc.pid, signal.SIGSTOP)
        if state_whole(exp_dir):
            return True
        os.kill(proc.proc.pid, signal.SIGCONT)
        return False
    wait_until(paused_with_state_whole, every=0.05, what="a moment when Ray Tune's state files are whole")
    if whole_group:  # the driver and every Ray process it started, at once: a batch scheduler killing the job
        os.killpg(proc.proc.pid, signal.SIGKILL)
    else:
        os.kill(proc.proc.pid, signal.SIGKILL)
