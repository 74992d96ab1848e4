"""The ablation (autospeed/search/ablation.py): the winner re-timed with each knob set back, side by side with
itself, each run in a fresh process. (`autospeed explain`, on the shared finished search: test_confirm.py.)"""

from __future__ import annotations

import json
import os
import statistics

import pytest

from autospeed.recipe import Recipe
from autospeed.search.confirm_stats import Candidate
from autospeed.track import names

PID_PLUGIN = """
    import os
    import torch
    from torch import nn
    from autospeed.workloads import Workload

    def pids(out: str = ""):
        def build():
            with open(out, "a") as f:
                f.write(f"{os.getpid()}\\n")
            return nn.Linear(3, 2)
        x, y = torch.randn(64, 3, generator=torch.Generator().manual_seed(0)), (torch.arange(64) % 2)
        x[:, 0] += y * 6  # the same data in every process, separable: every run reaches the target
        return Workload(name="pids", train_x=x, train_y=y, val_x=x, val_y=y, num_classes=2, build_model=build)
"""


def test_ablation_retimes_the_winner_with_each_knob_set_back_side_by_side_each_run_in_a_fresh_process(
        write_plugin, tmp_path, new_store):
    """Confirmation and ablation runs train through one path on every device (train_like_production): each
    run in a new process, never this one, as `autospeed train` does. The ablation sets one differing knob
    back at a time (warmup_fraction with its schedule), runs the winner beside it with the same seeds, and
    records the speed-up lost as the ratio of those medians."""
    from mlflow.tracking import MlflowClient

    from autospeed.recipe import Measured
    from autospeed.search.ablation import knobs_to_ablate, run_ablation, variants
    from autospeed.search.session import SearchSession
    from autospeed.search.storage import SearchDir
    from autospeed.space import SearchSpec
    from autospeed.track.export import _add_ablation

    write_plugin("pid_plugin", PID_PLUGIN)
    out = tmp_path / "pids.txt"
    common = dict(workload="pid_plugin:pids", workload_options={"out": str(out)}, target_accuracy=0.9,
                  batch_size=16, epochs=20, eval_every_epochs=1, device="cpu")
    winner, base = Recipe(lr=0.1, **common), Recipe(lr=0.01, **common)
    assert knobs_to_ablate(winner, base) == [("lr", {"lr": 0.01})]
    assert knobs_to_ablate(winner.model_copy(update={"schedule": "cosine", "warmup_fraction": 0.1}), base) == [
        ("lr", {"lr": 0.01}), ("schedule+warmup_fraction", {"schedule": "constant", "warmup_fraction": 0.0})]
    scaled = Recipe(lr=0.1, lr_scaling={"rule": "sqrt", "reference_batch": 128}, **common)
    ablated, _ = variants(Candidate("t1", False, None, scaled), base)
    scaling = next(a for a in ablated if a.knob == "lr_scaling")  # a knob whose value is a mapping
    assert json.loads(json.dumps(scaling.as_dict(2.0)))["set_back"] == {
        "lr_scaling": base.training_fields()["lr_scaling"]}

    spec = SearchSpec.model_validate({
        "name": "ablate", "workload": "pid_plugin:pids", "target_accuracy": 0.9,
        "budget": {"trials": 1, "max_train_seconds": 30}, "confirm": {"top_k": 1, "repeats": 2, "ablation": True},
        "resources": {"gpus_per_trial": 0, "cpus_per_trial": 1}, "space": {"lr": {"loguniform": [0.01, 0.1]}}})
    client = MlflowClient(new_store(tmp_path / "store"))
    parent = client.get_run(client.create_run(client.create_experiment("ablate")).info.run_id)
    session = SearchSession.direct(client, parent, "s1", SearchDir(tmp_path), open(os.devnull, "w"))
    ablated = run_ablation(session, spec, Candidate("t1", False, None, winner, ttas=[1.0] * 3), base, 4.0)

    pids = [int(p) for p in out.read_text().split()]
    assert len(pids) == 4 and len(set(pids)) == 4 and os.getpid() not in pids  # 2 rounds x (winner, lr)
    (lr,) = ablated
    runs = client.search_runs([parent.info.experiment_id], filter_string=f"tags.`{names.TAG_KIND}` = 'ablation'")
    assert sorted(r.data.tags[names.TAG_ABLATION_KNOB] for r in runs) == ["lr", "lr", "none", "none"]
    by_knob = {k: [r for r in runs if r.data.tags[names.TAG_ABLATION_KNOB] == k] for k in ("lr", "none")}
    assert {r.data.params["lr"] for r in by_knob["lr"]} == {"0.01"}
    assert {r.data.params["seed"] for r in by_knob["lr"]} == {r.data.params["seed"] for r in by_knob["none"]}
    medians = {k: statistics.median(r.data.metrics[names.M_TTA] for r in v) for k, v in by_knob.items()}
    assert lr.lost == pytest.approx(medians["lr"] / medians["none"])
    measured = Measured()
    _add_ablation(measured, client.get_run(parent.info.run_id).data.tags[names.TAG_ABLATION])
    assert measured.ablation == {"lr": pytest.approx(lr.lost)}
