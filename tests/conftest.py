"""Shared fixtures: a private dataset cache, fresh MLflow stores, a CLI runner, recipe and plugin writers."""

from __future__ import annotations

import os

# OpenMP threads that wait sleep instead of spinning, in the tests and every process they start (the env is
# inherited; libgomp reads it when torch loads, so this comes first). The suite runs two test processes on 2
# cores, each training with 2 threads beside Ray's and the searches' own processes: with spinning waiters, two
# 2-thread trainers side by side took 7.4 s and once 52 s each against 10.6 s sleeping (mnist1d, 3 epochs, this
# machine): the spinning threads starve the threads with work. A lone trainer is faster spinning (2.0 s against
# 3.9 s), which is why autospeed itself leaves the policy to the user: production trains alone.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import contextlib  # noqa: E402
import io  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

from autospeed.workloads import CACHE_ENV  # noqa: E402

# The test files that read the shared finished search (the `finished_search` fixture below).
SHARED_SEARCH_FILES = ("tests/search/test_run.py", "tests/search/test_confirm.py", "tests/search/test_probe.py",
                       "tests/show/test_browser.py")


# Seconds each slow file's tests took (setup included), `pytest --durations=0` at b1efaca on a 2-core EPYC: the
# scheduler below hands these out first, longest first. xdist's own order (most tests first) left the one-test
# reliability files, 30-70 s each, for last, and a worker can queue three of them while the other has run out: a
# simulation of xdist's queue on those durations ends its two workers 41 s apart, against 2 s longest first. A
# file missing here only runs later; stale figures only cost balance, never a test.
SLOW_FILE_SECONDS = {
    "tests/script/test_script_search.py": 114, "tests/script/test_context.py": 87,
    "tests/reliability/test_interrupt.py": 81, "tests/search/test_confirm.py": 73,
    "tests/reliability/test_tracking_outage.py": 72, "tests/reliability/test_kill_anywhere.py": 70,
    "tests/train/test_compile_cache.py": 62, "tests/experiments/test_all.py": 58, "tests/search/test_run.py": 57,
    "tests/search/test_data_parallel.py": 55, "tests/test_cli_train.py": 54,
    "tests/reliability/test_kill_confirmation.py": 54, "tests/reliability/test_cluster.py": 43,
    "tests/reliability/test_trial_faults.py": 34, "tests/reliability/test_full_disk.py": 33,
    "tests/reliability/test_probe_resume.py": 31, "tests/script/test_script_probe.py": 28,
    "tests/search/test_long_job.py": 27, "tests/show/test_browser.py": 22, "tests/train/test_process.py": 20,
    "tests/search/test_exploration_cap.py": 17, "tests/search/test_probe.py": 17, "tests/train/test_trainer.py": 16,
    "tests/train/test_train_on_track.py": 15, "tests/script/test_script_ways.py": 13,
    "tests/search/test_ablation.py": 13, "tests/search/test_confirm_fewest.py": 12,
    "tests/search/test_confirm_long.py": 11, "tests/show/test_report.py": 10,
}


def _scope_of(nodeid: str) -> str:
    file = nodeid.split("::", 1)[0]
    return "finished_search" if file in SHARED_SEARCH_FILES else file


def _scope_seconds(scope: str) -> int:
    if scope == "finished_search":
        return sum(SLOW_FILE_SECONDS.get(f, 0) for f in SHARED_SEARCH_FILES)
    return SLOW_FILE_SECONDS.get(scope, 0)


def pytest_xdist_make_scheduler(config, log):
    """With pytest-xdist (pyproject.toml: two workers) the tests of one file go to one worker, so its module
    fixtures (a search, a store, a process group, a cluster) are built once, and the files that read the
    shared finished search go to one worker together, so it runs once per test run. (xdist's own
    `--dist loadgroup` marks are not seen by pytest 9's node ids.) The slowest files go out first
    (SLOW_FILE_SECONDS), so the two workers end together."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            slowest = max(self.workqueue, key=_scope_seconds)  # the first of equals: xdist's order among the rest
            self.workqueue.move_to_end(slowest, last=False)
            super()._assign_work_unit(node)

    return ByFile(config, log)


def pytest_collection_modifyitems(config, items):
    """A reader of the shared search outside SHARED_SEARCH_FILES would build it a second time on the other
    worker: say where to list it."""
    for item in items:
        file = item.nodeid.split("::", 1)[0]
        if "finished_search" in item.fixturenames and file not in SHARED_SEARCH_FILES:
            raise pytest.UsageError(f"{file} reads finished_search: add it to SHARED_SEARCH_FILES in "
                                    f"tests/conftest.py")


@pytest.fixture(scope="session", autouse=True)
def cpu_lock_shared():
    """The tests hold the benchmarks' CPU lock shared (experiments/_common.py cpu_lock), as searches do: a
    timing benchmark, which holds it exclusively, waits for the test run to end, and a test run waits for
    a running benchmark, so no timing is taken on cores the tests load."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    from _common import cpu_lock  # as tests/experiments/test_common.py imports it

    with cpu_lock(exclusive=False):
        yield


@pytest.fixture(scope="session", autouse=True)
def dataset_cache(tmp_path_factory) -> Path:
    """Generated datasets go to a per-session folder, never to ~/.cache; subprocesses inherit it."""
    folder = tmp_path_factory.mktemp("autospeed-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(folder))
        yield folder


@pytest.fixture(scope="session")
def new_store(tmp_path_factory):
    """new_store(folder) -> the tracking URI of a new, empty MLflow SQLite store at folder/mlflow.db.

    MLflow creates a SQLite store's tables on first contact (about 2 s of schema migrations on 2
    cores); the test run pays that once, here, and each store starts as a copy of that empty one:
    what a user's second search on the same store finds. Tests of first contact itself (the
    creation race, a store that cannot be created) use a path that does not exist yet instead."""
    template = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments(max_results=1)

    def make(folder: Path, name: str = "mlflow.db") -> str:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template, folder / name)
        return f"sqlite:///{folder / name}"

    return make


@pytest.fixture
def write_recipe(tmp_path):
    """write_recipe(dict or YAML text, name=...) -> path of a recipe file in tmp_path."""

    def write(content: dict | str, name: str = "recipe.yaml") -> Path:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
        return path

    return write


@pytest.fixture
def write_plugin(tmp_path, monkeypatch):
    """write_plugin(module_name, source) -> folder; the module imports here and in CLI subprocesses."""

    def write(module_name: str, source: str) -> Path:
        (tmp_path / f"{module_name}.py").write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
        return tmp_path

    return write


def _main_in_process(*args: str) -> subprocess.CompletedProcess:
    from autospeed import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as e:  # argparse's usage errors and --help exit themselves
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    return subprocess.CompletedProcess(["autospeed", *args], code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def cli_in_process():
    """cli_in_process(*args) -> CompletedProcess (returncode, stdout, stderr) of the command's main() run
    in this process: the code `autospeed ARGS` runs, less a Python start-up per case (about 3 s on 2
    cores), for commands that never train (bad input, export, report). The command itself, its fast
    exit and its piped output are tests/test_cli.py's."""
    return _main_in_process


@pytest.fixture
def run_cli(tmp_path):
    """run_cli(*args, cwd=tmp_path, env=None) -> CompletedProcess of `python -m autospeed ARGS`."""

    def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autospeed", *args], cwd=cwd or tmp_path,
                              env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout)

    return run


# ---------------------------------------------------------------- one finished search per test run
PROBE_PLUGIN = """
import time

import torch
from torch import nn

from autospeed.workloads import load_workload


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        q = x.new_zeros(1, 1, 2, 4)
        torch.nn.functional.scaled_dot_product_attention(q, q, q)  # a model with attention: the knob acts
        if self.training and torch.backends.cuda.flash_sdp_enabled():  # attention not pinned to math: slow
            time.sleep(0.5)
        return self.net(x)


def digits():
    workload = load_workload("digits")
    workload.build_model = Mlp
    return workload
"""

SHARED_REPEATS, SHARED_TOP_K = 3, 1

# The digits data with a small MLP (probe_plugin:digits) whose training forward pass sleeps 0.5 s
# unless scaled_dot_product_attention is pinned to the math backend (attention: math; `auto` leaves
# every backend on): a step takes about a millisecond without the sleep, so math is the faster
# systems setting by a factor far beyond any timing noise, and the probe must fix it. Only the probe
# of `auto` sleeps: the baseline and every trial run attention: math. The low end of the LR range
# learns far too slowly: ASHA stops it. Epochs, not the clock, end a trial (the budget is far above
# what 30 digits epochs take even on a loaded machine). Confirmation re-runs the best recipe and the
# baseline, 3 fresh processes each (the fewest that give a speed-up interval).
SHARED_SPACE = {
    "name": "shared", "workload": "probe_plugin:digits", "target_accuracy": 0.9,
    "budget": {"trials": 6, "max_train_seconds": 120}, "asha": {"grace_seconds": 0.1, "reduction_factor": 2},
    "sampler": {"seed": 0, "n_startup_trials": 3},
    "confirm": {"top_k": SHARED_TOP_K, "repeats": SHARED_REPEATS},
    "probe": {"warmup_steps": 1, "steps": 3, "rounds": 2}, "resources": {"gpus_per_trial": 0},
    "baseline": {"batch_size": 32, "optimizer": "sgd", "lr": 0.05, "schedule": "constant", "precision": "fp32",
                 "compile": "none", "attention": "math"},
    "fixed": {"epochs": 30, "eval_every_epochs": 1},
    "space": {"batch_size": {"choice": [32, 64]}, "lr": {"loguniform": [0.00001, 0.3]},
              "schedule": {"choice": ["constant", "cosine"]}, "attention": {"choice": ["auto", "math"]}},
}


@pytest.fixture(scope="session")
def probe_plugin() -> str:
    """Source of probe_plugin.py: the digits workload with an MLP that is slow unless attention is math."""
    return PROBE_PLUGIN


class FinishedSearch:
    """One real search (Ray, Optuna's TPE, ASHA, the probe, MLflow, confirmation, best.yaml) run through
    the CLI as a user runs it; many tests read it and none changes what they read."""

    def __init__(self, folder: Path, uri: str, proc: subprocess.CompletedProcess, env: dict[str, str]):
        self.folder, self.uri, self.env = folder, uri, env
        self.name, self.stdout = SHARED_SPACE["name"], proc.stdout
        self.space, self.repeats, self.top_k = SHARED_SPACE, SHARED_REPEATS, SHARED_TOP_K

    def runs(self, kind: str | None = None) -> list:
        """MLflow runs of the search, of one `autospeed.kind` (search, trial, probe, confirm) or all."""
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.uri)
        exp = client.get_experiment_by_name(self.name)
        runs = client.search_runs([exp.experiment_id], max_results=1000)
        return [r for r in runs if kind is None or r.data.tags.get("autospeed.kind") == kind]

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """`python -m autospeed ARGS` in the search's folder, with its plugin importable."""
        return subprocess.run([sys.executable, "-m", "autospeed", *args], cwd=self.folder, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def main(self, *args: str) -> subprocess.CompletedProcess:
        """`autospeed ARGS` as .cli runs it, its main() in this process (cli_in_process): for commands that
        never train (export, report), less a Python start-up each."""
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(self.folder)
            mp.syspath_prepend(str(self.folder))  # the search's plugin workload imports, as on PYTHONPATH
            mp.delenv("MLFLOW_TRACKING_URI", raising=False)
            return _main_in_process(*args)


@pytest.fixture(scope="session")
def finished_search(tmp_path_factory, new_store) -> FinishedSearch:
    folder = tmp_path_factory.mktemp("finished-search")
    (folder / "probe_plugin.py").write_text(PROBE_PLUGIN)
    (folder / "space.yaml").write_text(yaml.safe_dump(SHARED_SPACE, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
    env.pop("MLFLOW_TRACKING_URI", None)
    uri = new_store(folder)
    proc = subprocess.run([sys.executable, "-m", "autospeed", "search", "--space", "space.yaml", "--tracking-uri", uri,
                           "--storage-path", str(folder / "runs")], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return FinishedSearch(folder, uri, proc, env)
