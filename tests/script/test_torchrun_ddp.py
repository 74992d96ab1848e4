"""A script written for torchrun (examples/torchrun_ddp: `init_process_group` from the environment, its own
DistributedDataParallel and DistributedSampler, rank-0 logging) run by autospeed with `workers: 2` on the CPU
(gloo): autospeed starts its two processes with torchrun's environment, and the knob context joins the group the
script made instead of making a second one, and keeps the script's DDP instead of wrapping it again.

Each process of the script is observed from outside it: a wrapper runs the unchanged example (runpy) and, after
it, appends what the process ended with (its rank, its optimizer steps, a checksum of its weights, how many DDP
wrappers its training model has) to a file."""

from __future__ import annotations

import difflib
import json
import runpy
import sys
from pathlib import Path

from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.run_recipe import train
from autospeed.script import channel

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torchrun_ddp"
WRAPPER = '''
import json, os, runpy, sys
from torch.nn.parallel import DistributedDataParallel
out = sys.argv.pop(1)
ran = runpy.run_path({example!r}, run_name="__main__")
model, wrappers = ran["model"], 0
while model is not None:  # the training model, through autospeed's wrappers and torch.compile's
    wrappers += isinstance(model, DistributedDataParallel)
    model = getattr(model, "inner", None) or getattr(model, "_orig_mod", None) or getattr(model, "module", None)
weights = sum(p.double().sum().item() for p in ran["raw_model"].parameters())
with open(out, "a") as f:
    f.write(json.dumps(dict(rank=int(os.environ.get("RANK", 0)), steps=ran["step"], weights=weights,
                            ddp_wrappers=wrappers)) + "\\n")
'''


def test_a_torchrun_script_trains_on_two_workers_in_its_own_process_group_and_ddp(tmp_path):
    """Both ranks take the same optimizer steps (their halves of each epoch: 12 of 32 samples each), end with the
    same weights (DDP averaged every step's gradients), under exactly one DDP (the script's own), and the run's
    record says 2 workers."""
    wrapper, seen = tmp_path / "observed_train.py", tmp_path / "ranks.jsonl"
    wrapper.write_text(WRAPPER.format(example=str(EXAMPLE / "train.py")))
    recipe = Recipe(workload="script", workload_options={"script": str(wrapper), "args": [str(seen), "--epochs=2"]},
                    device="cpu", workers=2, batch_size=32, epochs=2, eval_every_epochs=1, target_accuracy=1.0,
                    max_train_seconds=60)
    result = train(recipe, num_threads=1)
    assert result.status == Status.NOT_REACHED, (result.error, result.stderr_tail)
    assert result.applied["workers"] == 2 and result.environment["workers"] == 2
    assert result.evaluations == 2 and result.steps == 24
    ranks = sorted((json.loads(line) for line in seen.read_text().splitlines()), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["steps"] for r in ranks] == [24, 24]  # 768 training samples / 2 workers / 32, twice
    assert ranks[0]["weights"] == ranks[1]["weights"]
    assert [r["ddp_wrappers"] for r in ranks] == [1, 1]


def test_the_torchrun_example_run_alone_trains_as_its_plain_version(monkeypatch, capsys):
    """Without autospeed or torchrun around it, the searchable example prints the same losses and accuracies as the
    plain one (each run as `python SCRIPT` would, in this process), in at most 15 changed lines."""
    plain, searchable = (EXAMPLE / "train_plain.py").read_text(), (EXAMPLE / "train.py").read_text()
    diff = difflib.unified_diff(plain.splitlines(), searchable.splitlines(), lineterm="", n=0)
    assert len([line for line in diff if line.startswith("+") and not line.startswith("+++")]) <= 15
    for key in (*channel.ENV_KEYS, "RANK"):
        monkeypatch.delenv(key, raising=False)
    printed = []
    for name in ("train_plain.py", "train.py"):
        monkeypatch.setattr(sys, "argv", [name, "--device=cpu", "--epochs=2"])
        capsys.readouterr()
        runpy.run_path(str(EXAMPLE / name), run_name="__main__")
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] and printed[0].count("val accuracy") == 2


def test_the_preflight_of_a_two_worker_script_ends_every_worker_after_its_first_step(tmp_path):
    """The search's preflight runs the script to its first optimizer step: both workers end there, so rank 1 does
    not die in a DDP collective rank 0 has left (a gloo "Connection reset by peer" traceback in every search's
    output), and the script's defaults come back."""
    from autospeed.script.runner import ScriptRun

    recipe = Recipe(workload="script", workload_options={"script": str(EXAMPLE / "train.py"), "args": ["--epochs=1"]},
                    device="cpu", workers=2, max_train_seconds=60)
    run = ScriptRun(recipe, 32, 0.0, 1, preflight=True, layers={"workers": 2, "device": "cpu"})
    run.run(None)
    assert run.knobs_read is not None and run.defaults["lr"] == 0.05
    assert not any("Traceback" in line for line in run.tail), "\n".join(run.tail)  # what both workers printed
