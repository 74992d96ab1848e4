"""A user's own training script, run by autospeed (`train(recipe)` with `workload: script`, which starts the
script as a subprocess: autospeed.script.runner) and on its own (`python tiny_train.py`).

The knobs are checked where they must act: inside the script's loop, through what the tiny script
(tests/script/conftest.py) observes there (--observe: one JSON line per optimizer step), not through what
the result says it applied. Faults (a crash, a hang, a stop from the search, a target metric never reported)
are checked as a user sees them: the result's status, error and stderr tail, and no process left behind.
The compile test is last: it costs seconds on CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.run_recipe import train

SAMPLES = 128  # training samples: 4 optimizer steps an epoch at batch_size 32


def script_recipe(script: Path, *args: str, grace_seconds: float | None = None, **knobs) -> Recipe:
    """A recipe that runs `script ARGS` on the CPU for one epoch of SAMPLES samples at batch_size 32, to a
    target it does not reach (so the run ends at the schedule's end unless a test stops it otherwise)."""
    options = {"script": str(script), "args": ["--samples", str(SAMPLES), *args]}
    if grace_seconds is not None:
        options["timeout_grace_seconds"] = grace_seconds
    fields = {"workload": "script", "workload_options": options, "device": "cpu", "batch_size": 32, "lr": 0.5,
              "epochs": 1, "eval_every_epochs": 1, "target_accuracy": 1.0, "max_train_seconds": 30}
    return Recipe(**{**fields, **knobs})


def observations(path: Path) -> list[dict]:
    """What the script saw inside its loop, one dict per optimizer step (--observe)."""
    assert path.exists(), "the script never completed an optimizer step"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_bf16_foreach_and_accumulation_act_inside_the_scripts_loop(tiny_script, tmp_path):
    """precision bf16, optimizer_impl foreach, accumulation_steps 2: the script's forward runs under bf16
    autocast, its optimizer was built with foreach=True, and each optimizer step takes two micro-batches of
    batch_size 32."""
    seen_file = tmp_path / "observed.jsonl"
    recipe = script_recipe(tiny_script, "--observe", str(seen_file), precision="bf16", optimizer_impl="foreach",
                           accumulation_steps=2)
    result = train(recipe)
    assert result.status == Status.NOT_REACHED, result.error
    seen = observations(seen_file)
    assert len(seen) == SAMPLES // 64  # one epoch of 64-sample optimizer steps
    assert {o["autocast"] for o in seen} == {str(torch.bfloat16)}
    assert {o["foreach"] for o in seen} == {True}
    assert {(o["micro_batches"], o["micro_batch_size"]) for o in seen} == {(2, 32)}


def test_fp32_default_and_micro_batch_size_act_inside_the_scripts_loop(tiny_script, tmp_path):
    """The recipe's default precision (fp32): no autocast in the forward; micro_batch_size 16 of batch_size
    32: the loader yields 16 samples and each optimizer step takes two of them (the same effective batch)."""
    seen_file = tmp_path / "observed.jsonl"
    result = train(script_recipe(tiny_script, "--observe", str(seen_file), micro_batch_size=16))
    assert result.status == Status.NOT_REACHED, result.error
    seen = observations(seen_file)
    assert len(seen) == SAMPLES // 32  # the effective batch is still batch_size
    assert {o["autocast"] for o in seen} == {"none"}
    assert {(o["micro_batches"], o["micro_batch_size"]) for o in seen} == {(2, 16)}


def test_two_data_parallel_workers_are_two_processes_of_the_script_sharing_each_step(tiny_script, tmp_path):
    """workers: 2 starts the script twice, torchrun-style: two processes, each taking its half of every
    epoch (batch_size 32 per worker: half the steps of one worker), and the run reports 2 workers."""
    seen_file = tmp_path / "observed.jsonl"
    result = train(script_recipe(tiny_script, "--observe", str(seen_file), workers=2), num_threads=1)
    assert result.status == Status.NOT_REACHED, result.error
    assert result.applied["workers"] == 2 and result.environment["workers"] == 2
    seen = observations(seen_file)
    by_pid = {}
    for o in seen:
        by_pid.setdefault(o["pid"], []).append(o)
    assert len(by_pid) == 2  # two processes of the script
    assert all(len(steps) == SAMPLES // (2 * 32) for steps in by_pid.values())  # each worker: its shard's steps


def test_auto_micro_batch_restarts_the_script_with_half_the_micro_batch(tiny_script, tmp_path):
    """micro_batch_size auto, a script that runs out of memory above 16 samples: the script is started again
    (a second process) and trains in micro-batches of 16, which the result records. The first attempt spends
    1 s on the train clock before it runs out (in its forward): the run's clock carries it, as a user paid it,
    into the second process's evaluations and the result."""
    seen_file, pids_file = tmp_path / "observed.jsonl", tmp_path / "pids.txt"
    before_oom_seconds = 1.0
    recipe = script_recipe(tiny_script, "--observe", str(seen_file), "--oom-above", "16", "--pid-file",
                           str(pids_file), "--seconds-before-oom", str(before_oom_seconds), micro_batch_size="auto")
    result = train(recipe)
    assert result.status == Status.NOT_REACHED, result.error
    assert result.applied["micro_batch_size"] == 16
    # the clock carried over: the failed attempt's second is in what the retry recorded, in the second process's
    # first evaluation (its clock started at the offset) and in the run's train seconds
    assert result.micro_batch_retry_seconds >= before_oom_seconds
    assert result.history[0]["train_seconds"] >= result.micro_batch_retry_seconds
    assert result.train_seconds > result.micro_batch_retry_seconds
    seen = observations(seen_file)
    assert seen[-1]["micro_batch_size"] == 16 and seen[-1]["micro_batches"] == 2
    started = [int(line) for line in pids_file.read_text().split()]
    assert len(set(started)) == 2, f"the script should have started twice (32, then 16): pids {started}"
    assert {o["pid"] for o in seen} == {started[-1]}  # the steps were trained by the second process


def test_evaluation_inside_paused_is_not_charged_to_the_train_clock(tiny_script):
    """Each evaluation sleeps 1 s inside ctx.paused(): the run's wall time holds the sleeps, its train
    clock does not."""
    eval_seconds = 1.0
    result = train(script_recipe(tiny_script, "--eval-seconds", str(eval_seconds), eval_every_epochs=0.5))
    assert result.status == Status.NOT_REACHED, result.error
    assert result.evaluations == 2
    assert result.wall_seconds - result.train_seconds >= result.evaluations * eval_seconds
    assert result.train_seconds < result.evaluations * eval_seconds


def test_script_runs_alone_on_its_defaults(tiny_script, tmp_path):
    """`python tiny_train.py` without autospeed around it (no AUTOSPEED_* variables) trains on the defaults
    it passed to autospeed.init: batch_size 32 in one micro-batch a step, no autocast."""
    seen_file = tmp_path / "observed.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSPEED_")}
    done = subprocess.run([sys.executable, str(tiny_script), "--samples", str(SAMPLES), "--observe", str(seen_file)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    seen = observations(seen_file)
    assert {(o["micro_batch_size"], o["micro_batches"], o["autocast"]) for o in seen} == {(32, 1, "none")}


def test_a_crashing_script_fails_with_its_error_and_stderr(tiny_script):
    """An exception in the script: the run is failed, with the exception's message and the traceback's
    last line in the stderr tail (what the trial's MLflow run shows)."""
    result = train(script_recipe(tiny_script, "--crash-at-step", "3"))
    assert result.status == Status.FAILED
    assert "boom at step 3" in result.error
    assert "RuntimeError: boom at step 3" in (result.stderr_tail or "")


def test_a_hanging_script_is_killed_after_its_budget_and_grace(tiny_script, tmp_path):
    """A script that blocks forever at step 2 sends nothing more: past max_train_seconds plus
    timeout_grace_seconds it is killed, the run fails saying it hung, and its process is gone; the
    evaluation it made before (after step 1) stays on the result.
    (The silence counts from the script's start: the grace leaves its start-up, import torch, room to reach
    step 2 on a busy machine.)"""
    seen_file = tmp_path / "observed.jsonl"
    recipe = script_recipe(tiny_script, "--observe", str(seen_file), "--hang-at-step", "2", grace_seconds=3,
                           max_train_seconds=2, eval_every_epochs=1 / 16)  # 16 steps an epoch: each evaluates
    result = train(recipe)
    assert result.status == Status.FAILED
    assert result.error.startswith("killed:") and "hung" in result.error, result.error
    seen = observations(seen_file)
    assert len(seen) == 2  # it hung where it was told to
    assert not is_running(seen[-1]["pid"])
    assert result.evaluations == 1 and len(result.history) == 1 and result.history[0]["step"] == 1


def test_a_script_that_goes_on_after_its_result_keeps_it(tiny_script, tmp_path, capfd):
    """A script that reached its target (report(...).stop) and then goes on with after-work (a final test pass,
    a checkpoint save) that outlasts the 2 s allowed for it (after_result_seconds): it is ended there, said in a
    line, and its reached result is kept (it was thrown away as failed before, the sampler seeing an infeasible
    trial)."""
    recipe = script_recipe(tiny_script, "--after-work-forever", target_accuracy=0.5, epochs=20)
    recipe.workload_options["after_result_seconds"] = 2
    result = train(recipe)
    assert result.status == Status.REACHED and result.tta_seconds > 0, result.error
    err = capfd.readouterr().err
    assert "the script sent its result and goes on" in err and "its result is kept" in err, err[-2000:]


def test_on_eval_returning_true_stops_the_script(tiny_script, tmp_path):
    """The search says stop at the first evaluation: the run is stopped_early, the script trains no further
    step and its process has exited."""
    seen_file = tmp_path / "observed.jsonl"
    events = []

    def stop_now(event) -> bool:
        events.append(event)
        return True

    recipe = script_recipe(tiny_script, "--observe", str(seen_file), epochs=2, eval_every_epochs=0.5)
    result = train(recipe, on_eval=stop_now)
    assert result.status == Status.STOPPED_EARLY, result.error
    assert len(events) == 1
    seen = observations(seen_file)
    assert len(seen) == events[0].step == 2  # the steps up to the first evaluation, none after it
    assert not is_running(seen[-1]["pid"])


def test_a_script_that_never_reports_the_target_metric_fails_naming_it(tiny_script):
    """A script that reports val_loss only, to a val_accuracy target: failed, and the error names the
    target metric the script should report."""
    text = tiny_script.read_text()
    reported = "ctx.report(val_accuracy=acc, val_loss=loss.item())"
    assert reported in text
    loss_only = tiny_script.with_name("loss_only.py")
    loss_only.write_text(text.replace(reported, "ctx.report(val_loss=loss.item())"))
    result = train(script_recipe(loss_only))
    assert result.status == Status.FAILED
    assert "val_accuracy" in result.error, result.error


def test_compile_runs_the_scripts_training_forward_as_a_compiled_graph(tiny_script, tmp_path):
    """compile: default: the script's training forward ran through torch.compile: by its first optimizer step
    torch._dynamo had captured a graph in the script's process (its own counters), which no wrapper that
    merely looks compiled does; the same script eager captures none."""
    compiled_file, eager_file = tmp_path / "compiled.jsonl", tmp_path / "eager.jsonl"
    result = train(script_recipe(tiny_script, "--observe", str(compiled_file), compile="default"))
    assert result.status == Status.NOT_REACHED, result.error
    assert result.applied["compile"] == "default"
    compiled = observations(compiled_file)
    assert all(o["compiled_graphs"] >= 1 for o in compiled), compiled
    assert {o["compiled"] for o in compiled} == {"OptimizedModule"}
    eager = train(script_recipe(tiny_script, "--observe", str(eager_file)))
    assert eager.status == Status.NOT_REACHED, eager.error
    assert {o["compiled_graphs"] for o in observations(eager_file)} == {0}  # the counter tells the two apart


def test_train_json_is_json_when_the_script_prints(tiny_script, tmp_path):
    """A script that prints (its accuracy, a final test pass) keeps its output, on stderr: stdout of
    `autospeed train --script ... --json` is the result object alone (it was the script's lines, then the JSON)."""
    import yaml

    printing = tmp_path / "printing_train.py"
    printing.write_text(tiny_script.read_text() + '\nprint("final test pass: 0.97", flush=True)\n')
    recipe = script_recipe(printing).model_dump(mode="json", exclude_none=True)
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    done = subprocess.run([sys.executable, "-m", "autospeed", "train", "--config", "recipe.yaml", "--json",
                           "--no-track"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] == "not_reached"
    assert "final test pass: 0.97" in done.stderr


def test_a_scripts_loader_start_is_on_the_train_clock_as_in_the_trainer(tiny_script):
    """The batch fetch is on the clock: a loader worker that takes 1 s to start (worker_init_fn), started again at
    each of 2 epochs (not persistent), puts at least 2 s on the train clock. Before, the clock started after each
    fetch, so the starts after the first and after each evaluation were off it and persistent_workers could never
    change a script's TTA."""
    recipe = script_recipe(tiny_script, "--slow-worker-start", "1.0", epochs=2, eval_every_epochs=1, num_workers=1,
                           persistent_workers=False)
    result = train(recipe)
    assert result.status == Status.NOT_REACHED, result.error
    assert result.train_seconds >= 2.0, result.train_seconds


def test_a_scripts_applied_records_what_acted_attention_precision_and_zeroed_accumulation(tiny_script, capfd):
    """attention: math on a model that never calls scaled_dot_product_attention is not_applicable (seen in its
    first evaluation, as the trainer sees it); bf16 is recorded once ctx.autocast() ran, and as not read by a
    script that never enters it; a script that zeroes its gradients every micro-batch under accumulation_steps 2
    is said in a line and recorded as accumulation 1 (it trained each step on half its batch); the same script
    without the mistake (the first run, which also checks attention and bf16) is recorded as accumulation 2."""
    ran = train(script_recipe(tiny_script, attention="math", precision="bf16", accumulation_steps=2))
    assert ran.applied["attention"] == "not_applicable" and ran.applied["precision"] == "bf16", ran.applied
    assert ran.applied["not_applied"]["attention"] == {"asked": "math", "ran": "not_applicable"}
    assert ran.applied["accumulation_steps"] == 2 and not ran.applied["gradients_zeroed_between_micro_batches"]
    assert "zeroes its gradients" not in capfd.readouterr().err  # not said of a script that does it right

    plain = train(script_recipe(tiny_script, "--no-autocast", precision="bf16"))
    assert plain.applied["precision"] == "not_read" and "precision" in plain.applied["not_applied"], plain.applied

    zeroed = train(script_recipe(tiny_script, "--zero-each-micro-batch", accumulation_steps=2))
    assert zeroed.applied["accumulation_steps"] == 1 and zeroed.applied["gradients_zeroed_between_micro_batches"]
    assert zeroed.applied["not_applied"]["accumulation_steps"] == {"asked": 2, "ran": 1}
    assert "zeroes its gradients between the micro-batches" in capfd.readouterr().err
