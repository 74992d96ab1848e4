"""Bad input: exit 2, one line naming the file, the line or key path and the fix; no traceback."""

from __future__ import annotations

import textwrap

import pytest

from autospeed.cli import main

from .conftest import error_lines, search_runs

GOOD = """\
name: bad
workload: digits
target_accuracy: 0.9
budget: {trials: 2, max_train_seconds: 1}
baseline: {batch_size: 32, lr: 0.05}
fixed: {epochs: 5}
space:
  lr: {loguniform: [0.01, 0.5]}
  batch_size: {choice: [32, 64]}
"""

# (id, text replacing one line of GOOD or a whole file, words the one-line message must hold)
CASES = [
    ("yaml-syntax", GOOD.replace("fixed: {epochs: 5}", "fixed: {epochs: 5"), ["line 7", "column", "YAML syntax"]),
    ("unknown-key", GOOD.replace("budget:", "budgett:"), ["budgett", "did you mean 'budget'"]),
    ("unknown-nested-key", GOOD.replace("max_train_seconds: 1", "max_train_secs: 1"),
     ["budget.max_train_secs", "did you mean 'max_train_seconds'"]),
    ("unknown-knob", GOOD.replace("batch_size: {choice", "batch_sise: {choice"),
     ["space.batch_sise", "did you mean 'batch_size'"]),
    ("unknown-range-kind", GOOD.replace("loguniform:", "loguniforn:"),
     ["space.lr.loguniforn", "did you mean 'loguniform'"]),
    ("duplicate-key", GOOD + "target_accuracy: 0.8\n", ["duplicate key 'target_accuracy'", "line 10"]),
    ("wrong-type", GOOD.replace("trials: 2", "trials: many"), ["budget.trials", "'many'"]),
    ("inverted-range", GOOD.replace("[0.01, 0.5]", "[0.5, 0.01]"), ["space.lr", "low < high", "swap"]),
    ("empty-range", GOOD.replace("[0.01, 0.5]", "[0.1, 0.1]"), ["space.lr", "low < high"]),
    ("log-low-not-positive", GOOD.replace("[0.01, 0.5]", "[0.0, 0.5]"), ["space.lr", "low > 0"]),
    ("empty-choice", GOOD.replace("[32, 64]", "[]"), ["space.batch_size", "empty choice"]),
    ("unknown-workload", GOOD.replace("workload: digits", "workload: digitz"),
     ["unknown workload 'digitz'", "digits"]),
    ("target-above-1", GOOD.replace("target_accuracy: 0.9", "target_accuracy: 1.5"), ["target_accuracy", "1.5"]),
    ("target-zero", GOOD.replace("target_accuracy: 0.9", "target_accuracy: 0"), ["target_accuracy"]),
    ("baseline-out-of-range", GOOD.replace("batch_size: 32, lr", "batch_size: 0, lr"),
     ["baseline", "batch_size", "greater than or equal to 1"]),
    ("fixed-bad-value", GOOD.replace("fixed: {epochs: 5}", "fixed: {epochs: 5, precision: fp8}"),
     ["'fixed.precision'", "fp8"]),
    ("choice-value-not-allowed", GOOD.replace("[32, 64]", "[32, -4]"), ["space.batch_size.choice[1]"]),
    ("plugin-does-not-import", GOOD.replace("workload: digits", "workload: no_such_pkg.models:factory"),
     ["no_such_pkg.models", "does not import", "PYTHONPATH"]),
    # targets: the key and the metrics the workload offers
    ("target-unknown-metric", GOOD.replace("target_accuracy: 0.9", "target: {metric: val_bleu, mode: max, value: 0.3}"),
     ["'target.metric'", "does not report val_bleu", "offers: val_accuracy (max), val_loss (min)"]),
    ("target-mode-not-min-or-max",
     GOOD.replace("target_accuracy: 0.9", "target: {metric: val_loss, mode: lower, value: 1}"),
     ["'target.mode'", "'max' or 'min'", "'lower'", "offers: val_accuracy (max), val_loss (min)"]),
    ("target-mode-against-the-metric", GOOD.replace("target_accuracy: 0.9",
                                                    "target: {metric: val_loss, mode: max, value: 0.3}"),
     ["'target.mode'", "set mode: min", "offers: val_accuracy (max), val_loss (min)"]),
    ("target-value-never-met",
     GOOD.replace("target_accuracy: 0.9", "target: {metric: val_accuracy, mode: max, value: 1.5}"),
     ["'target.value'", "[0, 1]", "can never be met", "offers: val_accuracy (max), val_loss (min)"]),
    ("target-loss-below-zero",
     GOOD.replace("target_accuracy: 0.9", "target: {metric: val_loss, mode: min, value: -0.5}"),
     ["'target.value'", "can never be met", "offers:"]),
    ("target-lm-perplexity-below-one", GOOD.replace("workload: digits", "workload: lm").replace(
        "target_accuracy: 0.9", "target: {metric: val_perplexity, mode: min, value: 0.5}"),
     ["'target.value'", "val_perplexity takes values in [1, inf]", "val_loss (min), val_perplexity (min)"]),
    # lr_scaling and micro_batch_size: the key, the bad value and what is allowed
    ("lr-scaling-unknown-rule", GOOD.replace("fixed: {epochs: 5}",
                                             "fixed: {epochs: 5, lr_scaling: {rule: cubic, reference_batch: 64}}"),
     ["'fixed.lr_scaling'", "lr_scaling.rule", "'none', 'linear' or 'sqrt'", "'cubic'"]),
    ("lr-scaling-reference-below-1", GOOD.replace("fixed: {epochs: 5}",
                                                  "fixed: {epochs: 5, lr_scaling: {rule: linear, reference_batch: 0}}"),
     ["'fixed.lr_scaling'", "lr_scaling.reference_batch", "greater than or equal to 1", "(got 0)"]),
    ("lr-scaling-without-reference", GOOD.replace("fixed: {epochs: 5}", "fixed: {epochs: 5, lr_scaling: {rule: sqrt}}"),
     ["'fixed.lr_scaling'", "needs reference_batch"]),
    ("micro-batch-not-auto-or-int", GOOD.replace("fixed: {epochs: 5}", "fixed: {epochs: 5, micro_batch_size: half}"),
     ["'fixed.micro_batch_size'", "auto or an int >= 1", "'half'"]),
    ("confirm-max-repeats-below-repeats", GOOD.replace("fixed: {epochs: 5}",
                                                       "fixed: {epochs: 5}\nconfirm: {repeats: 3, max_repeats: 2}"),
     ["confirm", "max_repeats (2) must be >= repeats (3)"]),
    ("probe-steps-zero", GOOD.replace("fixed: {epochs: 5}", "fixed: {epochs: 5}\nprobe: {steps: 0}"),
     ["'probe.steps'", "greater than or equal to 1"]),
    ("both-targets", GOOD + "target: {metric: val_loss, mode: min, value: 0.3}\n",
     ["exactly one of target_accuracy", "or target"]),
]


@pytest.mark.parametrize("text,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validate_rejects_with_one_line(tmp_path, capsys, text, words):
    space = tmp_path / "space.yaml"
    space.write_text(text)
    code = main(["validate", "--space", str(space)])
    out, err = capsys.readouterr()
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(space) in lines[0]
    for w in words:
        assert w in lines[0], lines[0]
    assert "Traceback" not in err + out


def test_good_file_validates(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text(GOOD)
    assert main(["validate", "--space", str(space)]) == 0


@pytest.mark.parametrize("case", ["yaml-syntax", "unknown-key", "plugin-does-not-import"])
def test_search_rejects_before_anything_runs(tmp_path, case, cli_in_process, monkeypatch):
    text = dict((c[0], c[1]) for c in CASES)[case]
    space = tmp_path / "space.yaml"
    space.write_text(text)
    monkeypatch.chdir(tmp_path)  # the CLI's main() in this process: it never gets as far as Ray
    p = cli_in_process("search", "--space", str(space), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
                       "--storage-path", str(tmp_path / "store"))
    assert p.returncode == 2, p.stderr
    assert len(error_lines(p.stderr)) == 1 and "Traceback" not in p.stderr, p.stderr
    assert str(space) in error_lines(p.stderr)[0]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "store").exists()


def test_yaml_is_loaded_safely(tmp_path, capsys):
    """A YAML tag that would construct a Python object is an error, never executed."""
    marker = tmp_path / "pwned"
    space = tmp_path / "space.yaml"
    space.write_text(GOOD + textwrap.dedent(f"""\
        evil: !!python/object/apply:os.system ["touch {marker}"]
    """))
    assert main(["validate", "--space", str(space)]) == 2
    assert not marker.exists()
    assert "Traceback" not in capsys.readouterr().err


def test_search_on_missing_cifar10_names_the_space_file_and_the_folder(tmp_path, capfd, new_store):
    """Through the CLI's own entry point, in this process: the search fails before it starts Ray."""
    space = tmp_path / "space.yaml"
    missing = tmp_path / "no-cifar-here"
    space.write_text(GOOD.replace("workload: digits", f"workload: cifar10\nworkload_options: {{data_dir: {missing}}}"))
    uri = new_store(tmp_path)
    code = main(["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(tmp_path / "store")])
    out, err = capfd.readouterr()
    assert code == 2, err
    lines = error_lines(err)
    assert len(lines) == 1 and "Traceback" not in out + err, err
    assert str(space) in lines[0] and f"no CIFAR-10 data in {missing}" in lines[0]
    assert search_runs(uri, "bad") == ([], [])  # nothing ran


# ---------------------------------------------------------------- data-parallel workers
WORKER_CASES = [
    ("workers-per-trial-below-1", GOOD.replace("baseline:", "resources: {workers_per_trial: 0}\nbaseline:"),
     ["resources.workers_per_trial", "greater than or equal to 1"]),
    ("workers-knob-below-1", GOOD + "  workers: {choice: [1, 0]}\n", ["space.workers.choice[1]", "workers"]),
    ("several-gpus-per-worker",
     GOOD.replace("baseline:", "resources: {gpus_per_trial: 2, workers_per_trial: 2}\nbaseline:"),
     ["resources.gpus_per_trial", "one GPU", "'resources.workers_per_trial' asks for 2", "set gpus_per_trial: 1"]),
]


@pytest.mark.parametrize("text,words", [c[1:] for c in WORKER_CASES], ids=[c[0] for c in WORKER_CASES])
def test_validate_rejects_bad_workers_with_one_line(tmp_path, capsys, text, words):
    test_validate_rejects_with_one_line(tmp_path, capsys, text, words)


def test_search_rejects_more_workers_than_a_trial_has_cores(tmp_path, cli_in_process, monkeypatch):
    space = tmp_path / "space.yaml"
    space.write_text(GOOD.replace("baseline:", "resources: {cpus_per_trial: 1}\nbaseline:")
                     + "  workers: {choice: [1, 2]}\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.chdir(tmp_path)
    p = cli_in_process("search", "--space", str(space), "--tracking-uri", uri,
                       "--storage-path", str(tmp_path / "store"))
    assert p.returncode == 2, p.stderr
    lines = error_lines(p.stderr)
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for words in (str(space), "'space.workers.choice'", "2 workers need at least one CPU core each",
                  "a trial has 1", "lower the workers to 1"):
        assert words in lines[0], lines[0]
    # refused before anything runs: no store, no storage folder (cpus_per_trial is known without Ray)
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "store").exists()
