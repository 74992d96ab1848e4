"""The thin Ray adapter: a trial's config -> Recipe -> trainer; evaluations -> tune.report.

Every report carries `objective`, valid as a final value at any moment (docs/design.md "The
objective Optuna sees"): ASHA may stop the trial after any of them, and Tune then hands
the last one to Optuna. The last report of a trial that ended on its own has `final: True`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from autospeed.outcome import Status
from autospeed.script import channel
from autospeed.script.options import is_script
from autospeed.search.curve import TrialCurve, cap_seconds
from autospeed.search.records import RERUN_OF
from autospeed.search.storage import SearchDir, recipe_key
from autospeed.search.tuner import WORKERS
from autospeed.space import SearchSpec
from autospeed.track.names import M_COOLDOWN_PREFIX, M_COOLDOWN_TOTAL_SECONDS, METRIC_NAMES

FINAL = "final"  # key of the last report of a trial that ended on its own

def recipe_of(spec: SearchSpec, config: dict[str, Any]):
    """The recipe a trial's config stands for: the baseline (trial 0) or the sampled knobs."""
    params = {k: v for k, v in config.items() if k not in ("baseline", RERUN_OF)}
    return spec.recipe_for(params, baseline=config.get("baseline", False))


def node() -> str:
    """This trial's node: host name and Ray node id (`autospeed.env.node`)."""
    import ray

    from autospeed.train.environment import node_name

    return node_name(ray.get_runtime_context().get_node_id())


class TrialReports:
    """The reports of one trial, the same whether it trains here or on Ray Train workers: one per
    evaluation, then the final one."""

    def __init__(self, recipe, key: str, where: str, predict: dict[str, Any] | None = None, cap: float = 0.0,
                 pool: list[float] | None = None):
        self.recipe, self.key, self.where = recipe, key, where
        self.first = True
        self.curve = TrialCurve(recipe, predict, cap, pool)

    def evaluation(self, e) -> dict[str, Any]:
        from autospeed.train.environment import environment
        from autospeed.train.trainer import pick_device

        # The first report says where the trial runs, so a trial ASHA stops records it too.
        env = {}
        if self.first:
            import torch.distributed as dist

            # the workers this run trains on: its process group's size, as the trainer records it
            ran_on = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
            env = {"environment": json.dumps({**environment(pick_device(self.recipe)), "node": self.where,
                                              "workers": ran_on})}
        self.first = False
        self.curve.add(e.train_seconds, e.value, e.epoch, e.compile_seconds,
                       e.cooldown.get(f"{M_COOLDOWN_PREFIX}{self.recipe.resolved_target.metric}"))
        return {
            **env, "node": self.where, WORKERS: self.recipe.workers, "step": e.step, "epoch": e.epoch,
            "train_seconds": e.train_seconds,
            "wall_seconds": e.wall_seconds,
            **e.metrics, **{f"best_{k}": v for k, v in e.best_metrics.items()}, METRIC_NAMES: sorted(e.metrics),
            "value": e.value, "best_value": e.best_value, "train_loss": e.train_loss,
            "samples_per_second": e.samples_per_second, "objective": e.objective, FINAL: False,
            **{k: v for k, v in (("tokens_per_second", e.tokens_per_second), ("mfu", e.mfu)) if v is not None},
            **e.cooldown,  # a cooldown branch taken at this evaluation (autospeed.train.cooldown)
            # an ASHA-stopped trial never sends the final report: its run takes these from here
            "compile_seconds": e.compile_seconds, "peak_memory_mb": e.peak_memory_mb, "recipe_key": self.key,
            # under predict: the prediction from the curve so far, and the objective it gives (search/curve.py)
            **self.curve.fields(Status.RUNNING, e.reached, e.best_value, e.train_seconds if e.reached else None),
        }

    def final(self, r) -> dict[str, Any]:
        from autospeed.train.batch import pin_micro_batch

        metric = self.recipe.resolved_target.metric
        return {
            FINAL: True, "status": r.status.value, WORKERS: self.recipe.workers, "step": r.steps,
            "train_seconds": r.train_seconds,
            # the target metric's key carries its best value, so the scheduler reads the final standing
            # (NaN before any evaluation: Tune requires the key, ASHA ignores NaN)
            metric: r.best_value if r.best_value is not None else math.nan, "best_value": r.best_value,
            **{f"best_{k}": v for k, v in r.best_metrics.items()},
            "tta_seconds": r.tta_seconds, "wall_seconds": r.wall_seconds, "compile_seconds": r.compile_seconds,
            "wall_to_target_seconds": r.wall_to_target_seconds, "wall_clock_origin": r.wall_clock_origin,
            "peak_memory_mb": r.peak_memory_mb, "samples_per_second": r.samples_per_second, "objective": r.objective,
            M_COOLDOWN_TOTAL_SECONDS: r.cooldown_seconds,
            "error": r.error or "", "stderr_tail": r.stderr_tail or "", "applied": json.dumps(r.applied),
            "node": self.where,
            "environment": json.dumps({**r.environment, "node": self.where}),
            # micro_batch_size auto: the recipe.yaml that confirmation and export read pins the micro-batch that fit
            "recipe_yaml": pin_micro_batch(self.recipe, r.applied).to_yaml(), "recipe_key": self.key,
            **self.curve.fields(r.status, r.status == Status.REACHED, r.best_value, r.tta_seconds),
        }


def trainable(config: dict[str, Any], spec_json: str, threads: int, search_dir: str, gpus: int = 0) -> None:
    """One trial. `threads`: the trial's CPU cores (torch threads of a one-worker trial); `gpus`: its
    GPUs (with N workers: one per worker)."""
    from ray import tune

    folder = SearchDir(Path(search_dir))
    done = folder.finished(tune.get_context().get_trial_id())
    if done is not None:
        # Finished (and recorded in MLflow) before a kill that beat Tune's state save:
        # hand Tune the recorded outcome instead of training it again.
        tune.report(done)
        return

    from autospeed.run_recipe import train
    from autospeed.workloads import load_workload_once

    where = node()
    spec = SearchSpec.model_validate_json(spec_json)
    recipe = recipe_of(spec, config)
    key = recipe_key(recipe.training_fields())
    first = folder.first_of_recipe(key)
    if first is not None:
        # The sampler proposed a recipe this search already trained (TPE does on discrete
        # spaces): hand back that result instead of spending the compute again.
        tune.report({**first, FINAL: True, "duplicate_of": first["trial_id"], "recipe_key": key, "node": where,
                     "train_seconds": 0.0, "wall_seconds": 0.0, "step": 0, "recipe_yaml": recipe.to_yaml()})
        return
    # under predict: the exponents of the trials finished so far, pooled with this one's (autospeed.horizon)
    pool = folder.exponents() if spec.predict.enabled else []
    if recipe.workers > 1 and not is_script(recipe.workload):  # a script starts its own workers (torchrun-style)
        _drive_workers(recipe, key, threads, gpus, folder, tune.get_context().get_trial_id(),
                       spec.predict.model_dump(), cap_seconds(spec), pool)
        return

    reports = TrialReports(recipe, key, where, spec.predict.model_dump(), cap_seconds(spec), pool)
    if spec.script_workdir:  # a script starts where the search started, not in this trial's folder (Ray's cwd)
        os.environ[channel.WORKDIR] = spec.script_workdir
    workload = load_workload_once(recipe.workload, recipe.workload_options)  # reused actors load it once

    early_stop = spec.predict.enabled and spec.predict.early_stop  # the ledger is read only then

    def on_eval(e) -> bool:
        tune.report(reports.evaluation(e))
        # predict.early_stop: ended once its predicted TTA cannot be among the confirm.top_k best
        return early_stop and reports.curve.stop_early(folder.incumbent_high_seconds(spec.confirm.top_k))

    r = train(recipe, workload, on_eval=on_eval, num_threads=threads, cooldown=cooldown_of(spec, recipe))
    tune.report(reports.final(r))


def cooldown_of(spec: SearchSpec, recipe):
    """The cooldown branches a trial takes (autospeed.train.cooldown): a wsd trial's, in a search with predict on
    and a cooldown_fraction above 0; None for every other."""
    from autospeed.train.cooldown import Cooldown

    p = spec.predict
    if not (p.enabled and p.cooldown_fraction > 0 and recipe.schedule == "wsd"):
        return None
    return Cooldown(p.cooldown_fraction, p.cooldown_each_evaluation)


def _drive_workers(recipe, key: str, cpus: int, gpus: int, folder: SearchDir, trial_id: str,
                   predict: dict[str, Any], cap: float, pool: list[float]) -> None:
    """This trial as the driver of a Ray Train run on the recipe's workers; Ray's TuneReportCallback
    hands rank 0's reports to Tune. The workers stop at the first evaluation that finds the trial's
    stop file, which ASHA writes (data_parallel.request_stop)."""
    from ray.tune.integration.ray_train import TuneReportCallback

    from autospeed.parallel.launch import fit, worker_threads
    from autospeed.search.data_parallel import DRIVER_CPUS, stop_file

    stop = stop_file(folder.path, trial_id)
    stop.unlink(missing_ok=True)  # a request to this trial's earlier run, which a killed search left: it starts over
    config = {"recipe": recipe.model_dump_json(), "key": key, "stop_file": str(stop),
              "threads": worker_threads(recipe.workers, cpus), "predict": predict, "cap": cap, "pool": pool}
    fit(_trial_worker, config, workers=recipe.workers, cpus=cpus, gpus=gpus > 0, driver_cpus=DRIVER_CPUS,
        storage_path=str(folder.path / "train"), name=trial_id, callbacks=[TuneReportCallback()])


def _trial_worker(config: dict[str, Any]) -> None:
    """One Ray Train worker of a trial: every worker reports at the same evaluations (Ray Train's
    report is a barrier); Tune receives rank 0's, which names the trial's stop file for ASHA. Once
    that file exists the run stops (the trainer stops every worker when one asks) and sends its
    final report: the trial ends on its own, `stopped_early`."""
    import os

    import ray.train

    from autospeed.recipe import Recipe
    from autospeed.search.data_parallel import STOP_FILE
    from autospeed.train.trainer import train

    recipe = Recipe.model_validate_json(config["recipe"])
    reports = TrialReports(recipe, config["key"], node(), config.get("predict"), config.get("cap", 0.0),
                           config.get("pool"))

    def on_eval(e) -> bool:
        ray.train.report({**reports.evaluation(e), STOP_FILE: config["stop_file"]})
        return os.path.exists(config["stop_file"])

    r = train(recipe, on_eval=on_eval, num_threads=config["threads"])
    ray.train.report(reports.final(r))


def trial_resources(config: dict[str, Any], spec_json: str, cpus: float, gpus: int):
    """What Tune reserves for a trial: its cores and GPUs when it trains itself (one worker); only
    the driver's token share when Ray Train's workers reserve the rest (docs/design.md "Scale-out")."""
    from ray.tune import PlacementGroupFactory

    from autospeed.search.data_parallel import DRIVER_CPUS

    recipe = recipe_of(SearchSpec.model_validate_json(spec_json), config)
    if is_script(recipe.workload):  # the script's workers are its own processes, inside the trial's share
        return PlacementGroupFactory([{"CPU": cpus, "GPU": gpus * recipe.workers}])
    if recipe.workers == 1:
        return PlacementGroupFactory([{"CPU": cpus, "GPU": gpus}])
    return PlacementGroupFactory([{"CPU": DRIVER_CPUS}])
