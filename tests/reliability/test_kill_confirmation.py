"""A search SIGKILLed inside confirmation and again inside the ablation, each followed by `--resume`: every
finished confirmation and ablation run is kept once, the runs in flight are closed KILLED, and the closing summary
and export are those an uninterrupted search gives from the same runs (docs/design.md "Crash anywhere, lose
nothing"; issue 40).

The kills land where kill_points.py says (`production_run`: a run opened, before it trains), never at a moment a
clock picked: the first with 1 of the 4 confirmation runs (the best recipe and the baseline, 2 rounds) finished, in
the middle of a round, the second with 1 of the 4 ablation runs (the winner and its one knob set back, 2 rounds)
finished. Two rounds show what three would, with 7 fewer fresh processes than 3 candidates in 3 rounds. The
workload sleeps per training step, so the searched batch size decides the speed and the winner is never the
baseline (whose ablation would be empty). Both resumes find every trial finished: they start no Ray (Ray's session
folders, in a temp dir of the test's own, show it), as nothing is left for Ray to run."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import yaml

from .conftest import cli_env, client_for, search_runs, write_space

pytestmark = pytest.mark.timeout(1200)

NAME = "killed_confirming"
TOP_K, REPEATS = 1, 2  # 2 candidates x 2 rounds = 4 confirmation runs; 2 x 2 = 4 ablation runs

STEADY_PLUGIN = '''
"""Four well-separated blobs, and a training step that takes 20 ms whatever its batch: the batch size decides
the time to target (a batch of 16 needs 24 steps an epoch, one of 128 needs 3)."""
import time
import torch
from torch import nn
from autospeed.workloads import Workload


class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        if self.training:
            time.sleep(0.02)
        return self.body(x)


def steady():
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(4, 16, generator=g) * 3
    y = torch.randint(0, 4, (512,), generator=g)
    x = centers[y] + torch.randn(512, 16, generator=g)
    return Workload(name="steady", train_x=x[:384], train_y=y[:384], val_x=x[384:], val_y=y[384:],
                    build_model=Slow, num_classes=4)
'''


def _space(d: Path) -> Path:
    (d / "steady_plugin.py").write_text(textwrap.dedent(STEADY_PLUGIN))
    return write_space(d, {
        "name": NAME, "workload": "steady_plugin:steady", "target_accuracy": 0.9,
        "budget": {"trials": 3, "max_train_seconds": 60}, "asha": {"enabled": False},
        "sampler": {"kind": "random", "seed": 0}, "probe": {"enabled": False},
        "confirm": {"top_k": TOP_K, "repeats": REPEATS, "ablation": True},
        "baseline": {"batch_size": 16}, "fixed": {"lr": 0.2, "epochs": 30, "eval_every_epochs": 1},
        "space": {"batch_size": {"choice": [96, 128]}},
    })


def test_a_search_killed_in_confirmation_and_in_its_ablation_resumes_with_each_run_once_and_the_same_export(
        tmp_path, request, new_store):
    d = tmp_path
    space = _space(d)
    uri = new_store(d)  # an empty store, as a user's second search finds it: its creation is test_kill_anywhere's
    args = ["search", "--space", str(space), "--tracking-uri", uri, "--storage-path", str(d / "store"), "--resume"]
    ray_tmp = Path(tempfile.mkdtemp(prefix="as-ray-"))  # short: Ray's session folders hold unix sockets
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    env = cli_env({"RAY_TMPDIR": str(ray_tmp)}, pythonpath=d)
    hook = Path(__file__).with_name("kill_points.py")
    outputs = []
    # the 2nd run of the first driver (1 confirmation run finished, its round half done); the 5th of the resumed one:
    # the 3 confirmation runs it misses, then 1 ablation run finished
    for n in (2, 5):
        p = subprocess.run([sys.executable, str(hook), "production_run", str(n), "--", *args], cwd=d, env=env,
                           capture_output=True, text=True, timeout=600)
        outputs.append(f"--- production_run:{n} rc={p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}")
        assert p.returncode == -signal.SIGKILL, "\n".join(outputs)  # the kill landed where the plan says
        # the first driver's trials ran on a Ray it started; a resume with every trial finished starts none
        assert len(list((ray_tmp / "ray").glob("session_2*"))) == 1, "\n".join(outputs)
    done = subprocess.run([sys.executable, "-m", "autospeed", *args], cwd=d, env=env, capture_output=True,
                          text=True, timeout=600)
    outputs.append(f"--- final rc={done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}")
    every = "\n".join(outputs)
    assert done.returncode == 0, every
    assert len(list((ray_tmp / "ray").glob("session_2*"))) == 1, every

    from autospeed.track import names

    client = client_for(uri)
    (parent,), _ = search_runs(uri, NAME)
    children = client.search_runs([parent.info.experiment_id], max_results=1000,
                                  filter_string=f"tags.`{names.TAG_PARENT}` = '{parent.info.run_id}'")

    def of_kind(kind: str, status: str) -> list:
        return [r for r in children if r.data.tags[names.TAG_KIND] == kind and r.info.status == status]

    def keys(runs: list) -> list[tuple[str, str, str]]:
        return sorted((r.data.tags[names.TAG_TRIAL_ID], r.data.tags.get(names.TAG_ABLATION_KNOB, ""),
                       r.data.tags[names.TAG_CONFIRM_REPEAT]) for r in runs)

    confirm, ablation = of_kind(names.KIND_CONFIRM, "FINISHED"), of_kind(names.KIND_ABLATION, "FINISHED")
    assert len(confirm) == (TOP_K + 1) * REPEATS, every  # exactly the 4 planned, none trained twice
    assert len(set(keys(confirm))) == len(confirm), keys(confirm)
    assert len(ablation) == 2 * REPEATS and len(set(keys(ablation))) == len(ablation), keys(ablation)
    # each kill cost the run in flight: closed KILLED on resume, never left RUNNING
    assert len(of_kind(names.KIND_CONFIRM, "KILLED")) == 1 and len(of_kind(names.KIND_ABLATION, "KILLED")) == 1
    assert not [r for r in children if r.info.status == "RUNNING"]
    assert len(children) == 3 + 4 + 1 + 4 + 1  # trials, confirmation and ablation runs: nothing else started

    expected_summary, expected_ablation, expected = _uninterrupted(client, parent.info.run_id, confirm, ablation)
    final = done.stdout
    assert expected_summary in final, every  # the closing summary, as an uninterrupted search prints it
    assert expected_ablation in final, every
    # the last resume kept every confirmation run and the ablation's first, and trained only the other 3
    assert final.count("(finished before the resume: kept)") == 4 + 1, every
    best = yaml.safe_load(next((d / "store" / NAME).glob("*/best.yaml")).read_text())["measured"]
    assert best["trial_id"] == expected.pop("trial_id"), every  # the export: the same winner, figures, ablation
    assert best["ablation"] == pytest.approx(expected.pop("ablation")), every
    assert {k: best.get(k) for k in expected} == pytest.approx(expected), every


def _uninterrupted(client, parent_id: str, confirm: list, ablation: list):
    """What an uninterrupted search prints and exports from these finished runs: the candidates it picks, each
    run recorded in its round's order, the winner decided; the ablation of that winner from its runs."""
    from autospeed.search.ablation import format_ablation, variants
    from autospeed.search.confirm import pick_candidates
    from autospeed.search.confirm_ledger import KeptResult
    from autospeed.search.confirm_stats import decide
    from autospeed.search.confirm_text import compute_line, format_confirmation
    from autospeed.track import names

    parent = client.get_run(parent_id)
    candidates = pick_candidates(client, parent, TOP_K)
    by_round = sorted(confirm, key=lambda r: int(r.data.tags[names.TAG_CONFIRM_REPEAT]))
    for c in candidates:
        for run in (r for r in by_round if r.data.tags[names.TAG_TRIAL_ID] == c.trial_id):
            c.record(KeptResult.of(run))
    outcome = decide(candidates, REPEATS)
    assert outcome.winner is not None and not outcome.winner.baseline, format_confirmation(outcome)
    ablated, _ = variants(outcome.winner, outcome.baseline.recipe)
    for a in ablated:
        for run in sorted(ablation, key=lambda r: int(r.data.tags[names.TAG_CONFIRM_REPEAT])):
            knob = run.data.tags[names.TAG_ABLATION_KNOB]
            (a.reference if knob == "none" else a.runs if knob == a.knob else None).record(KeptResult.of(run))
    exported = {"tta_seconds_median": outcome.winner.median, "speedup_vs_baseline": outcome.speedup,
                "baseline_tta_seconds_median": outcome.baseline.median, "repeats": REPEATS,
                "trial_id": outcome.winner.trial_id, "ablation": {a.knob: a.lost for a in ablated}}
    summary = format_confirmation(outcome) + "\n" + compute_line(outcome)
    return summary, format_ablation(ablated, outcome.speedup), exported
