"""The recipe schema: defaults, round trip, and one-line messages for bad files."""

from __future__ import annotations

import pytest

from autospeed.errors import UserError
from autospeed.recipe import KNOB_FIELDS, Recipe, load_recipe

DESIGN_KNOBS = ("workload", "workload_options", "target_accuracy", "max_train_seconds", "epochs",
                "eval_every_epochs", "seed", "batch_size", "accumulation_steps", "optimizer", "momentum",
                "weight_decay", "lr", "schedule", "warmup_fraction", "label_smoothing", "precision", "compile",
                "channels_last", "data_loader", "num_workers", "pin_memory", "prefetch_factor",
                "persistent_workers", "cudnn_benchmark", "activation_checkpointing", "target", "optimizer_impl",
                "attention", "micro_batch_size", "lr_scaling")


def error_for(write_recipe, text: str) -> str:
    path = write_recipe(text, name="bad.yaml")
    with pytest.raises(UserError) as info:
        load_recipe(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), "every message names the file first"
    assert "\n" not in message
    return message


def test_every_knob_of_the_design_is_a_recipe_field():
    assert set(DESIGN_KNOBS) <= set(KNOB_FIELDS)


def test_a_minimal_recipe_takes_the_defaults(write_recipe):
    recipe = load_recipe(write_recipe("workload: digits\n"))

    assert recipe.workload == "digits"
    assert (recipe.precision, recipe.compile, recipe.data_loader) == ("fp32", "none", "device")
    assert recipe.accumulation_steps == 1


def test_recipe_round_trips_through_yaml(write_recipe):
    recipe = Recipe(workload="digits", workload_options={"hidden": 64}, batch_size=64, precision="bf16",
                    compile="default", schedule="onecycle", data_loader="dataloader", num_workers=2)

    assert load_recipe(write_recipe(recipe.to_yaml())) == recipe


def test_batch_knobs_round_trip_through_yaml(write_recipe):
    recipe = Recipe(workload="digits", batch_size=256, micro_batch_size="auto",
                    lr_scaling={"rule": "sqrt", "reference_batch": 64})

    assert load_recipe(write_recipe(recipe.to_yaml())) == recipe


def test_measured_section_is_accepted_and_ignored_by_training(write_recipe):
    recipe = load_recipe(write_recipe(
        "workload: digits\nmeasured: {tta_seconds: 1.5, speedup_vs_baseline: 2.0, environment: {device: cpu}}\n"))

    assert recipe.measured.tta_seconds == 1.5
    assert "measured" not in recipe.training_fields()


@pytest.mark.parametrize("text, expected", [
    ("batch_sise: 32\n", "unknown key 'batch_sise'; did you mean 'batch_size'?"),
    ("lr: 0.1\nlr: 0.2\n", "duplicate key 'lr' at line 2 (first at line 1)"),
    ("batch_size: lots\n", "key 'batch_size'"),
    ("target_accuracy: 1.5\n", "key 'target_accuracy'"),
    ("lr: 0\n", "key 'lr'"),
    ("accumulation_steps: 0\n", "key 'accumulation_steps'"),
    ("label_smoothing: 1.0\n", "key 'label_smoothing'"),
    ("precision: fp8\n", "key 'precision'"),
    ("compile: fastest\n", "key 'compile'"),
    ("epochs: 1\neval_every_epochs: 2\n", "eval_every_epochs (2.0) must be <= epochs (1.0)"),
    ("persistent_workers: true\n", "persistent_workers needs num_workers >= 1"),
    ("lr: [0.1\nepochs: 3\n", "YAML syntax error at line 2, column 7"),
    ("- 1\n- 2\n", "a recipe must be a mapping"),
])
def test_bad_recipe_is_one_line_naming_file_and_key(write_recipe, text, expected):
    assert expected in error_for(write_recipe, text)


def test_wrong_value_message_shows_the_bad_value(write_recipe):
    assert "(got 1.5)" in error_for(write_recipe, "target_accuracy: 1.5\n")
    assert "'fp32', 'tf32', 'bf16' or 'fp16'" in error_for(write_recipe, "precision: fp8\n")


def test_unknown_key_far_from_any_field_lists_the_allowed_keys(write_recipe):
    message = error_for(write_recipe, "zzzzzz: 1\n")
    assert "unknown key 'zzzzzz'" in message and "allowed keys:" in message and "batch_size" in message


def test_unknown_key_in_measured_section_is_allowed_for_newer_exporters(write_recipe):
    recipe = load_recipe(write_recipe("measured: {tta_seconds: 1.0, something_new: 3}\n"))
    assert recipe.measured.tta_seconds == 1.0


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(UserError, match="nowhere.yaml: file not found"):
        load_recipe(tmp_path / "nowhere.yaml")


def test_atomic_writes_get_normal_permissions(tmp_path):
    """best.yaml and friends are shared with teammates: not mkstemp's owner-only 0600."""
    import os

    from autospeed.yamlio import write_atomic

    old = os.umask(0o022)
    try:
        new = write_atomic(tmp_path / "best.yaml", "a: 1\n")
        assert new.stat().st_mode & 0o777 == 0o644
        private = tmp_path / "private.yaml"
        private.write_text("a: 0\n")
        private.chmod(0o600)
        write_atomic(private, "a: 1\n")  # overwriting keeps the file's own permissions
        assert private.stat().st_mode & 0o777 == 0o600 and private.read_text() == "a: 1\n"
    finally:
        os.umask(old)


def test_target_accuracy_is_shorthand_for_a_max_target(write_recipe):
    short = load_recipe(write_recipe("workload: digits\ntarget_accuracy: 0.9\n"))
    full = load_recipe(write_recipe("workload: digits\ntarget: {metric: val_accuracy, mode: max, value: 0.9}\n"))
    default = load_recipe(write_recipe("workload: digits\n"))

    assert short.resolved_target == full.resolved_target
    target = full.resolved_target
    assert (target.metric, target.mode, target.value) == ("val_accuracy", "max", 0.9)
    assert default.resolved_target.value == 0.95
    assert load_recipe(write_recipe(full.to_yaml())) == full, "a target round-trips through YAML"


def test_a_loss_target_is_met_downwards():
    target = Recipe(target={"metric": "val_loss", "mode": "min", "value": 1.6}).resolved_target
    assert target.met(1.6) and target.met(1.2) and not target.met(1.7) and not target.met(float("nan"))
    assert target.describe() == "val_loss <= 1.6"


@pytest.mark.parametrize("text, expected", [
    ("target_accuracy: 0.9\ntarget: {metric: val_loss, mode: min, value: 1}\n", "not both"),
    ("target: {metric: val_loss, mode: down, value: 1}\n", "key 'target.mode'"),
    ("target: {metric: val_loss, mode: min, value: .nan}\n", "key 'target.value'"),
    ("target: {metric: val_loss, mode: min}\n", "missing required key 'target.value'"),
], ids=["both", "bad-mode", "nan-value", "no-value"])
def test_bad_targets_name_the_key(write_recipe, text, expected):
    assert expected in error_for(write_recipe, "workload: digits\n" + text)
