"""`autospeed train` as a user runs it: output, exit codes, messages, MLflow run."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autospeed.recipe import load_recipe

WORKLOADS_DOC = Path(__file__).resolve().parent.parent / "docs" / "workloads.md"

# Reaches 0.95 in about 3 epochs, in well under a second of training.
REACHES = {"workload": "digits", "target_accuracy": 0.95, "max_train_seconds": 30, "epochs": 10,
           "eval_every_epochs": 1, "batch_size": 32, "lr": 0.1}
NEVER_REACHES = {**REACHES, "target_accuracy": 1.0, "epochs": 1}


def one_line_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{stderr}"
    assert "Traceback" not in stderr
    assert lines[0].startswith("autospeed: error: ")
    return lines[0]


# ---------------------------------------------------------------- result and exit codes
def test_train_prints_a_summary_naming_knobs_not_applied(run_cli, write_recipe):
    recipe = {**REACHES, "channels_last": True, "cudnn_benchmark": True}
    done = run_cli("train", "--config", str(write_recipe(recipe)), "--no-track")

    assert done.returncode == 0, done.stderr
    assert re.search(r"status reached +TTA \d+\.\d\d s \(train clock\), wall to target \d+\.\d\d s "
                     r"\(from process start\)", done.stdout)
    not_applied = re.search(r"not applied on cpu: (.*)", done.stdout).group(1)
    assert sorted(not_applied.split(", ")) == ["channels_last=true (n/a)", "cudnn_benchmark=true (n/a)"]


def test_target_not_reached_still_exits_0(run_cli, write_recipe):
    done = run_cli("train", "--config", str(write_recipe(NEVER_REACHES)), "--json", "--no-track")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "not_reached" and result["tta_seconds"] is None
    assert result["wall_to_target_seconds"] is None


def test_diverged_run_exits_1_with_one_line(run_cli, write_recipe):
    done = run_cli("train", "--config", str(write_recipe({**NEVER_REACHES, "lr": 1e6})), "--no-track")

    assert done.returncode == 1
    assert "status diverged" in done.stdout
    assert "run diverged: train loss became" in one_line_error(done.stderr)


def test_out_of_memory_run_exits_1(run_cli, write_recipe, write_plugin):
    write_plugin("cli_oom_plugin", """
        import torch
        from torch import nn
        from autospeed.workloads import load_workload

        class NoRoom(nn.Linear):
            def forward(self, x):
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

        def always_oom():
            workload = load_workload("digits")
            workload.build_model = lambda: NoRoom(64, 10)
            return workload
    """)
    done = run_cli("train", "--config", str(write_recipe({**NEVER_REACHES, "workload": "cli_oom_plugin:always_oom"})),
                   "--json", "--no-track")

    assert done.returncode == 1
    assert json.loads(done.stdout)["status"] == "oom"
    assert "run oom: OutOfMemoryError" in done.stderr


# ---------------------------------------------------------------- MLflow
def test_train_json_prints_the_result_object_and_logs_an_mlflow_run(run_cli, write_recipe, tmp_path, new_store):
    """One run (a Python start-up) for both: the result object on stdout, the same figures in its MLflow run."""
    from mlflow.tracking import MlflowClient

    uri = new_store(tmp_path)
    config = write_recipe(REACHES)
    done = run_cli("train", "--config", str(config), "--tracking-uri", uri, "--json")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # progress goes to stderr, so stdout is pure JSON
    for field in ("status", "tta_seconds", "best_val_accuracy", "train_seconds", "wall_seconds",
                  "compile_seconds", "peak_memory_mb", "samples_per_second", "applied", "environment",
                  "wall_to_target_seconds", "wall_clock_origin"):
        assert field in result
    assert result["status"] == "reached"
    assert result["tta_seconds"] == result["train_seconds"] <= result["wall_seconds"]
    # from the process's start: the interpreter and imports before training are in it, not in the run's wall
    assert result["wall_clock_origin"] == "process start"
    assert result["wall_to_target_seconds"] > result["wall_seconds"]
    assert result["best_val_accuracy"] >= 0.95
    assert result["samples_per_second"] > 0 and result["peak_memory_mb"] > 0
    assert result["applied"]["device"] == "cpu" and result["applied"]["compile"] == "none"
    for field in ("device_name", "cpu_count", "torch", "cuda", "autospeed"):
        assert field in result["environment"]

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("autospeed-train")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`autospeed.kind` = 'train'")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["autospeed.status"] == "reached"
    assert run.data.params["batch_size"] == "32" and run.data.params["workload"] == "digits"
    assert run.data.metrics["tta_seconds"] == pytest.approx(result["tta_seconds"])
    assert run.data.metrics["best_val_accuracy"] == pytest.approx(result["best_val_accuracy"])
    assert run.data.metrics["objective"] == pytest.approx(result["tta_seconds"])  # reached: objective is the TTA
    assert run.data.metrics["wall_to_target_seconds"] == pytest.approx(result["wall_to_target_seconds"])
    assert run.data.tags["autospeed.wall_clock_origin"] == "process start"
    history = client.get_metric_history(run.info.run_id, "val_accuracy")
    assert len(history) == result["evaluations"]
    assert sorted(h.step for h in history) == [h.step for h in history]
    recipe_yaml = Path(client.download_artifacts(run.info.run_id, "recipe.yaml", str(tmp_path)))
    assert load_recipe(recipe_yaml) == load_recipe(config)


# The command's main() in a fresh interpreter, then what it imported: start-up pays only for what the run needs.
MAIN_THEN_MODULES = """
import sys
from autospeed.cli import main
code = main(sys.argv[1:])
print("imported:", " ".join(sorted({m.split(".")[0] for m in sys.modules})))
sys.exit(code)
"""


def test_no_track_logs_no_run_and_imports_no_tracking(write_recipe, tmp_path):
    from autospeed.workloads import load_workload

    load_workload("digits")  # its data cached, as after a user's first run: no scikit-learn import in the next
    store = tmp_path / "would-be-mlflow.db"
    done = subprocess.run([sys.executable, "-c", MAIN_THEN_MODULES, "train", "--config",
                           str(write_recipe(NEVER_REACHES)), "--no-track"], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{store}"}, timeout=300)

    assert done.returncode == 0, done.stderr
    imported = done.stdout.split("imported: ")[1].split()
    assert "torch" in imported
    assert not {"mlflow", "ray", "optuna", "sklearn", "pandas"} & set(imported)
    assert "logged MLflow run" not in done.stdout + done.stderr
    assert not store.exists()
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


# ---------------------------------------------------------------- bad input: exit 2, one line
@pytest.mark.parametrize("text, expected", [
    ("workload: digits\nbatch_sise: 32\n", "unknown key 'batch_sise'; did you mean 'batch_size'?"),
    ("workload: digits\nlr: 0.1\nlr: 0.2\n", "duplicate key 'lr' at line 3 (first at line 2)"),
    ("workload: digits\nbatch_size: lots\n", "key 'batch_size': Input should be a valid integer"),
    ("workload: digits\ntarget_accuracy: 1.5\n", "key 'target_accuracy': Input should be less than or equal to 1"),
    ("workload: digits\nlr: [0.1\nepochs: 3\n", "YAML syntax error at line 3, column 7"),
    ("workload: digits\ntarget: {metric: val_bleu, mode: max, value: 0.3}\n",
     "key 'target.metric': workload 'digits' does not report val_bleu; it offers: val_accuracy (max), val_loss (min)"),
    ("workload: digits\ntarget: {metric: val_loss, mode: up, value: 0.3}\n",
     "key 'target.mode': Input should be 'max' or 'min' (got 'up'); workload 'digits' offers: val_accuracy (max)"),
    ("workload: digits\ntarget: {metric: val_loss, mode: min, value: -1}\n",
     "key 'target.value': val_loss takes values in [0, inf], so a target of -1 can never be met"),
], ids=["unknown-key", "duplicate-key", "wrong-type", "out-of-range", "yaml-syntax", "target-unknown-metric",
        "target-bad-mode", "target-impossible-value"])
def test_bad_recipe_exits_2_with_one_line_naming_file_and_key(cli_in_process, write_recipe, text, expected):
    config = write_recipe(text, name="bad.yaml")
    done = cli_in_process("train", "--config", str(config), "--no-track")

    assert done.returncode == 2
    line = one_line_error(done.stderr)
    assert f"{config}: " in line
    assert expected in line
    assert done.stdout == ""


def test_missing_config_file_exits_2(cli_in_process, tmp_path):
    done = cli_in_process("train", "--config", str(tmp_path / "nowhere.yaml"), "--no-track")

    assert done.returncode == 2
    assert "nowhere.yaml: file not found" in one_line_error(done.stderr)


def test_unknown_workload_option_exits_2(cli_in_process, write_recipe):
    done = cli_in_process("train", "--config", str(write_recipe({**REACHES, "workload_options": {"hiddn": 3}})),
                            "--no-track")

    assert done.returncode == 2
    assert "workload_options.hiddn: unknown option for workload 'digits'" in one_line_error(done.stderr)


def test_missing_cifar10_data_exits_2_naming_the_folder(cli_in_process, write_recipe, tmp_path):
    folder = tmp_path / "datasets" / "cifar"
    done = cli_in_process("train", "--config", str(write_recipe({"workload": "cifar10", "workload_options":
                                                                   {"data_dir": str(folder)}})), "--no-track")

    assert done.returncode == 2
    line = one_line_error(done.stderr)
    assert f"no CIFAR-10 data in {folder}" in line
    assert "cifar-10-batches-py" in line and "download: true" in line


def test_usage_error_exits_2(cli_in_process):
    done = cli_in_process("train")

    assert done.returncode == 2
    line = one_line_error(done.stderr)
    assert "--config" in line and "autospeed train --help" in line


# ---------------------------------------------------------------- the plugin examples of docs/workloads.md
def _here_first() -> str:
    """PYTHONPATH=. as the docs say, ahead of any path the tests themselves run under."""
    return os.pathsep.join(filter(None, [".", os.environ.get("PYTHONPATH")]))


def test_documented_plugin_example_runs_verbatim(run_cli, tmp_path):
    readme = WORKLOADS_DOC.read_text()
    module = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "def blobs" in b)
    recipe = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "my_workload:blobs" in b)
    command = re.search(r"`PYTHONPATH=\. autospeed (train [^`]*)`", readme).group(1)
    (tmp_path / "my_workload.py").write_text(module)
    (tmp_path / "blobs.yaml").write_text(recipe)

    done = run_cli(*shlex.split(command), cwd=tmp_path, env={"PYTHONPATH": _here_first()})

    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(recipe)["workload"] == "my_workload:blobs"
    assert "status reached" in done.stdout


def test_documented_dataset_plugin_reads_files_and_trains_to_its_loss_target(run_cli, tmp_path):
    readme = WORKLOADS_DOC.read_text()
    module = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "class NpyFolder" in b)
    recipe = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "npy_files:npy_folder" in b)
    command = re.search(r"`PYTHONPATH=\. autospeed (train --config npy_folder\.yaml[^`]*)`", readme).group(1)
    (tmp_path / "npy_files.py").write_text(module)
    (tmp_path / "npy_folder.yaml").write_text(recipe)

    done = run_cli(*shlex.split(command), "--json", cwd=tmp_path, env={"PYTHONPATH": _here_first()})

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "reached" and result["target"] == {"metric": "val_loss", "mode": "min", "value": 0.3}
    assert result["best_val_loss"] <= 0.3 and result["applied"]["data_loader"] == "dataloader"
    assert len(list((tmp_path / "npy_data" / "train").glob("*.npy"))) == 2000, "one file per sample"


# ---------------------------------------------------------------- data-parallel workers
def test_train_runs_a_two_worker_recipe_to_its_target_and_logs_its_workers(run_cli, write_recipe, tmp_path,
                                                                          new_store):
    from mlflow.tracking import MlflowClient

    uri = new_store(tmp_path)
    # batch_size is per worker: 2 workers x 16 make the steps of one worker's 32
    config = write_recipe({**REACHES, "batch_size": 16, "workers": 2, "device": "cpu"})
    done = run_cli("train", "--config", str(config), "--tracking-uri", uri, "--json")

    assert done.returncode == 0, done.stderr
    assert "2 data-parallel workers" in done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "reached" and result["best_val_accuracy"] >= 0.95
    assert result["applied"]["workers"] == 2 and result["environment"]["workers"] == 2
    # rank 0 trained in a Ray worker, whose process start says nothing about this run
    assert result["wall_clock_origin"] == "train() entry" and result["wall_to_target_seconds"] >= result["tta_seconds"]
    client = MlflowClient(tracking_uri=uri)
    run = client.search_runs([client.get_experiment_by_name("autospeed-train").experiment_id])[0]
    assert run.data.params["workers"] == "2" and run.data.tags["autospeed.env.workers"] == "2"


def test_train_rejects_more_workers_than_cores_in_one_line(cli_in_process, write_recipe):
    workers = os.cpu_count() + 1
    config = write_recipe({**REACHES, "workers": workers, "device": "cpu"})
    done = cli_in_process("train", "--config", str(config), "--no-track")

    assert done.returncode == 2
    line = one_line_error(done.stderr)
    assert str(config) in line and "'workers'" in line and f"lower the workers to {os.cpu_count()}" in line


def test_train_rejects_zero_workers_in_one_line(cli_in_process, write_recipe):
    config = write_recipe({**REACHES, "workers": 0})
    done = cli_in_process("train", "--config", str(config), "--no-track")

    assert done.returncode == 2
    line = one_line_error(done.stderr)
    assert str(config) in line and "workers" in line and "greater than or equal to 1" in line
