"""The data-parallel launcher (autospeed/parallel/launch.py) without starting Ray: where N workers fit, how the
cores are split, and that `autospeed train` of a `workers: N` recipe needs nothing of the search. Its runs on real
Ray Train workers are tested end to end by tests/test_cli_train.py (`autospeed train`) and
tests/search/test_data_parallel.py (a search's trials)."""

from __future__ import annotations

import ast
from pathlib import Path

import autospeed
from autospeed.parallel.launch import placement_problem, worker_threads

PACKAGE = Path(autospeed.__file__).parent


def _imported(path: Path) -> set[str]:
    """Every module `path` imports, at its top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_the_launcher_and_the_ray_set_up_it_uses_import_nothing_of_the_search():
    """`autospeed train` with workers goes through autospeed.parallel and autospeed._ray only: importing
    autospeed.search would load the whole search pipeline (Tune, Optuna, MLflow glue) into a production run."""
    files = [*sorted((PACKAGE / "parallel").glob("*.py")), PACKAGE / "_ray.py"]
    for f in files:
        bad = sorted(m for m in _imported(f) if m == "autospeed.search" or m.startswith("autospeed.search."))
        assert not bad, f"{f.relative_to(PACKAGE)} imports {bad}"
    cli = _imported(PACKAGE / "cli.py")
    assert "autospeed.parallel.launch.train_on_workers" in cli


def test_workers_on_cpu_need_a_core_each_and_split_the_cores_evenly():
    assert placement_problem(2, cpus=2, gpus=0, cluster_gpus=0) is None
    problem = placement_problem(3, cpus=2, gpus=0, cluster_gpus=0)
    assert "3 workers need at least one CPU core each" in problem and "lower the workers to 2" in problem
    assert worker_threads(2, 5) == 2 and worker_threads(4, 2) == 1


def test_workers_on_gpus_take_one_gpu_each():
    assert placement_problem(2, cpus=8, gpus=1, cluster_gpus=2) is None
    assert "lower the workers to 1" in placement_problem(2, cpus=8, gpus=1, cluster_gpus=1)
    assert "set gpus_per_trial: 1" in placement_problem(2, cpus=8, gpus=2, cluster_gpus=4)
