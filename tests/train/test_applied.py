"""The `applied` record (autospeed/train/applied.py): one place names every field a run's `applied` holds, for the
built-in trainer and a user's script alike. (What each knob records as it acts: test_trainer.py, test_setup.py,
tests/script/test_context.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

import autospeed
from autospeed.train.applied import NOT_APPLICABLE, Applied, not_applied


def _written_keys(tree: ast.AST) -> set[str]:
    """String keys the code writes into a dict it calls `applied` (or `*.applied`): `applied["k"] = ...`,
    `applied.setdefault("k", ...)`, `applied.update({"k": ...})` and `applied: Applied = {"k": ...}`."""
    def is_applied(node) -> bool:
        return (isinstance(node, ast.Name) and node.id == "applied") or (
            isinstance(node, ast.Attribute) and node.attr == "applied")

    def literal_keys(node) -> set[str]:
        if isinstance(node, ast.Dict):
            return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        return set()

    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            for target in getattr(node, "targets", [getattr(node, "target", None)]):
                if isinstance(target, ast.Subscript) and is_applied(target.value) and isinstance(
                        target.slice, ast.Constant):
                    keys.add(target.slice.value)
        elif isinstance(node, ast.AnnAssign) and is_applied(node.target) and node.value is not None:
            keys |= literal_keys(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_applied(node.func.value):
            if node.func.attr == "update" and node.args:
                keys |= literal_keys(node.args[0])
            elif node.func.attr == "setdefault" and isinstance(node.args[0], ast.Constant):
                keys.add(node.args[0].value)
        elif isinstance(node, ast.keyword) and node.arg == "applied":
            keys |= literal_keys(node.value)
    return keys


def test_every_field_the_code_writes_into_applied_is_named_in_the_record():
    root = Path(autospeed.__file__).parent
    written = {key: path.relative_to(root) for path in root.rglob("*.py")
               for key in _written_keys(ast.parse(path.read_text()))}

    assert len(written) >= 30  # the walk finds the trainer's and the script context's writes
    unnamed = {k: str(p) for k, p in written.items() if k not in Applied.__annotations__}
    assert not unnamed, f"add these fields to autospeed/train/applied.py Applied: {unnamed}"
    assert set(Applied.__annotations__) == set(written)  # and no field that nothing writes any more


class _Recipe:
    optimizer, momentum, precision, compile, attention = "sgd", 0.9, "tf32", "none", "math"
    channels_last = activation_checkpointing = cudnn_benchmark = pin_memory = persistent_workers = False
    data_loader, num_workers, prefetch_factor, warmup_fraction, label_smoothing = "device", 0, 2, 0.0, 0.0


def test_not_applied_lists_each_knob_set_that_did_not_act_and_none_left_at_a_value_that_asks_nothing():
    ran = {"optimizer": "sgd", "momentum": 0.9, "precision": "fp32", "attention": NOT_APPLICABLE,
           "compile": "none", "channels_last": False}

    assert not_applied(_Recipe(), ran) == {"precision": {"asked": "tf32", "ran": "fp32"},
                                           "attention": {"asked": "math", "ran": NOT_APPLICABLE}}
    assert not_applied(_Recipe(), {}) == {}  # a run that failed before setting its knobs up recorded nothing
