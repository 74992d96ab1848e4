"""Fault injection for real: the CLI in a subprocess, signals, plugin workloads that fail."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
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


GATED_PLUGIN = """
\"\"\"A workload whose training waits at a gate until the test opens it.

A test that interrupts a trial must interrupt one that is training, whatever the
machine's speed: so every model built (one per trained run) stops at its first
training step after its first evaluation, writes "<build> <pid> <seed>" to
waiting.log, and waits there until the test creates open-<build> (or open, for
every build). A build the test never opens is still training when the signal
lands. Builds are numbered from 1 in builds.log across every process of the
test (searches, resumes, Ray workers, the CLI's confirmation runs).

Only builds whose torch seed (the recipe's seed: the trainer seeds torch before it
builds the model) is >= gate_from_seed wait; the others pass.
\"\"\"
import fcntl
import os
import time

import torch
from torch import nn
from autospeed.workloads import Workload

GIVE_UP_SECONDS = 900  # a gate nobody opens: long after every test's own timeout


def _append(path, line):
    # One line per writer, under a lock: the line count is the build number.
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = sum(1 for _ in f) + 1
        f.write(line.format(n=n) + "\\n")
        f.flush()
        return n


class Gated(nn.Module):
    def __init__(self, gate_dir, gate_from_seed):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.gate_dir, self.seed = gate_dir, torch.initial_seed()
        self.build = _append(os.path.join(gate_dir, "builds.log"), f"{{n}} {os.getpid()} {self.seed}")
        self.evaluated, self.passed = False, self.seed < gate_from_seed

    def forward(self, x):
        if not self.training:
            self.evaluated = True
        elif self.evaluated and not self.passed:
            self.passed = True
            self._wait()
        return self.body(x)

    def _wait(self):
        mine, every = (os.path.join(self.gate_dir, f) for f in (f"open-{self.build}", "open"))
        if os.path.exists(mine) or os.path.exists(every):
            return
        _append(os.path.join(self.gate_dir, "waiting.log"), f"{self.build} {os.getpid()} {self.seed}")
        give_up = time.monotonic() + GIVE_UP_SECONDS
        # Plain sleeps: Ctrl-C, SIGTERM and Ray's stop reach this process as they would reach training.
        while not (os.path.exists(mine) or os.path.exists(every)):
            if time.monotonic() > give_up:
                raise RuntimeError(f"gate {self.build} was never opened")
            time.sleep(0.02)


def gated(gate_dir, spread=0.5, gate_from_seed=0):
    \"\"\"Four blobs in 16-D: spread 0.5 overlaps (about 0.8 accuracy at best), 3 separates them.\"\"\"
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(4, 16, generator=g) * spread
    y = torch.randint(0, 4, (512,), generator=g)
    x = centers[y] + torch.randn(512, 16, generator=g)
    return Workload(name="gated", train_x=x[:384], train_y=y[:384], val_x=x[384:], val_y=y[384:],
                    build_model=lambda: Gated(gate_dir, gate_from_seed), num_classes=4)
"""


def cli_env(extra: dict[str, str] | None = None, pythonpath: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", **(extra or {})}
    env.pop("MLFLOW_TRACKING_URI", None)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), os.environ.get("PYTHONPATH")]))
    return env


def autospeed(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 240):
    """`python -m autospeed ARGS` to completion: CompletedProcess with text stdout/stderr."""
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

    def wait(self, timeout: float = 180) -> int:
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
    """The test's side of GATED_PLUGIN: which builds wait at the gate, and opening it."""

    def __init__(self, folder: Path):
        (folder / "gated_plugin.py").write_text(textwrap.dedent(GATED_PLUGIN))
        self.plugin_dir, self.dir = folder, folder / "gate"
        self.dir.mkdir()

    def workload(self, **options) -> dict:
        """The search-space keys that select the gated workload."""
        return {"workload": "gated_plugin:gated", "workload_options": {"gate_dir": str(self.dir), **options}}

    def open(self, *builds: int) -> None:
        """Let these builds through (before or after they reach the gate); no build: every build."""
        for name in [f"open-{b}" for b in builds] or ["open"]:
            (self.dir / name).touch()

    def builds(self) -> int:
        log = self.dir / "builds.log"
        return len(log.read_text().splitlines()) if log.exists() else 0

    def waiting(self) -> list[int]:
        """Builds that reached the gate (opened since or not)."""
        log = self.dir / "waiting.log"
        return [int(line.split()[0]) for line in log.read_text().splitlines()] if log.exists() else []

    def wait_for(self, build: int, proc: "Running") -> None:
        """Until build `build` waits at its gate: mid-training, after an evaluation."""
        wait_until(lambda: build in self.waiting() or proc.proc.poll() is not None, what=f"build {build} at the gate")
        assert proc.proc.poll() is None, proc.stdout + proc.stderr


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


def wait_until(predicate, timeout: float = 150, every: float = 0.5, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("autospeed: error:")]
