"""The project's own example scripts in the common shapes (examples/): each plain version beside its
searchable version. Run alone, the searchable version trains bit-identically to the plain one (the same
losses, the same weights), and it stays within the issue's line budget (15 changed lines for an iteration
loop with clipping and its own LR function). Each runs as `python SCRIPT ARGS` would, in this process (runpy:
no second torch start-up), with no autospeed around it."""

from __future__ import annotations

import difflib
import runpy
import sys
from pathlib import Path

import pytest

from autospeed.script import channel

ROOT = Path(__file__).resolve().parents[2]
ITERATION_LOOP = ROOT / "examples" / "iteration_loop"


def _run_alone(script: Path, args: tuple[str, ...], monkeypatch, capsys) -> str:
    for key in channel.ENV_KEYS:  # no autospeed around it
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    capsys.readouterr()
    runpy.run_path(str(script), run_name="__main__")
    return capsys.readouterr().out


@pytest.mark.parametrize("example", [ITERATION_LOOP])
def test_an_example_run_alone_trains_bit_identically_to_its_plain_version(example, monkeypatch, capsys):
    """The iteration loop (its own get_batch, LR function, AdamW built in the model class, clipping after
    unscale): converted in at most 15 added lines, and run alone the same losses and weights over 21 steps."""
    plain, searchable = (example / "train_plain.py").read_text(), (example / "train.py").read_text()
    diff = list(difflib.unified_diff(plain.splitlines(), searchable.splitlines(), lineterm="", n=0))
    added = [line for line in diff if line.startswith("+") and not line.startswith("+++")]
    assert len(added) <= 15, "\n".join(added)
    args = ("--max_iters=20", "--eval_interval=10", "--device=cpu", "--dtype=float32")  # CPU kernels: deterministic
    ran = _run_alone(example / "train.py", args, monkeypatch, capsys)
    assert ran == _run_alone(example / "train_plain.py", args, monkeypatch, capsys)
    assert ran.count("loss") == 24 and "weights" in ran  # 21 steps, 3 evaluations, the final weights
