"""A script as its author wrote it (docs/design.md round 4, "User scripts, as written"): run alone it is plain
PyTorch (no target, no budget, no stop on NaN); every loop shape steps (a `while True` loop with its own
batch function); Accelerate's names (prepare, clip_grad_norm_ under fp16, a reusable autocast); an optimizer
built elsewhere takes optimizer_impl; `schedule: script` keeps the script's own LR function.

In-process contexts on the CPU, on a few parameters: each test costs milliseconds, not a script's start-up."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from torch import nn

import autospeed
from autospeed.recipe import Recipe
from autospeed.script import channel
from autospeed.script.context import Context, script_recipe


@pytest.fixture(autouse=True)
def _alone(monkeypatch):
    """No autospeed around these contexts: none of the runner's environment."""
    for key in channel.ENV_KEYS:
        monkeypatch.delenv(key, raising=False)


def script_context(**knobs) -> Context:
    """A context run by autospeed (not alone), on the CPU: a script's recipe with these knobs over its own ways."""
    return Context(script_recipe({"device": "cpu", "lr": 0.1}, knobs))


def test_run_alone_a_script_needs_no_target_and_no_budget_and_trains_on_through_nan():
    """`python train.py` with defaults that name no target and no budget: report(val_loss=...) is no error, a
    run past the recipe's default 60 s is not cut, and a NaN train loss does not stop it: none of that was the
    script's. Its schedule and optimizer are its own (`script`)."""
    ctx = autospeed.init(defaults={"lr": 0.1, "batch_size": 8})
    assert ctx.alone and ctx.recipe.schedule == "script" and ctx.recipe.optimizer == "script"
    assert ctx.report(val_loss=2.0) == (False, "")
    ctx.clock.total = 3600.0  # an hour of training so far: far past the recipe's default budget
    assert ctx.report(train_loss=math.nan, val_loss=1.5) == (False, "")
    assert not ctx.finished and ctx.best_metrics["val_loss"] == 1.5


def test_run_alone_a_target_the_script_names_still_stops_it():
    """The script's own early stop (a target in its defaults) keeps working alone."""
    ctx = autospeed.init(defaults={"target_accuracy": 0.9})
    assert ctx.report(val_accuracy=0.5) == (False, "")
    assert ctx.report(val_accuracy=0.95) == (True, "reached")


def test_step_with_the_scripts_own_batch_function_steps_at_every_kth_backward():
    """A `while True` loop with its own get_batch (no ctx.steps): each ctx.backward is a micro-batch, and
    ctx.step steps the optimizer on every accumulation_steps-th, freeing the gradients. eval_every_steps sets
    the evaluation cadence in steps."""
    ctx = script_context(accumulation_steps=2, eval_every_steps=2, epochs=1, eval_every_epochs=1)
    model = nn.Linear(4, 1)
    opt = ctx.optimizer(torch.optim.SGD, model.parameters(), lr=ctx.lr())
    g = torch.Generator().manual_seed(0)

    def get_batch():
        return torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)

    with pytest.raises(RuntimeError, match="ctx.backward"):
        ctx.step(opt)  # no micro-batch yet: a clear error, never a silent no-op
    start = model.weight.detach().clone()
    stepped, evals = [], []
    for _ in range(8):  # 8 micro-batches: 4 optimizer steps
        x, y = get_batch()
        ctx.backward(nn.functional.mse_loss(model(x), y))
        stepped.append(ctx.step(opt))
        evals.append(ctx.should_eval())
    assert stepped == [False, True] * 4 and ctx.step_count == 4
    assert evals == [False, False, False, True, False, False, False, True]  # after steps 2 and 4
    assert not torch.equal(model.weight, start) and model.weight.grad is None
    assert ctx.clock.total > 0  # its training was on the train clock


def _a_model_and_its_gradient():
    """A seeded linear model, a batch, and a copy of the model with its fp32 gradient on that batch (its norm is
    what clipping must see)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    reference = nn.Linear(4, 1)
    reference.load_state_dict(model.state_dict())
    nn.functional.mse_loss(reference(x), y).backward()
    return model, x, y, reference


def test_clip_grad_norm_under_fp16_unscales_the_gradients_first():
    """precision fp16 (the gradient scaler, enabled on the CPU too): ctx.clip_grad_norm_ sees the true
    gradient norm, not the scaled one, and the step after it applies the unscaled gradient once."""
    model, x, y, reference = _a_model_and_its_gradient()
    true_norm = torch.cat([p.grad.flatten() for p in reference.parameters()]).norm()

    ctx = script_context(precision="fp16")
    assert ctx._stepper_for().scaler.is_enabled() and ctx._stepper_for().scaler.get_scale() > 1
    opt = ctx.optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    ctx.backward(nn.functional.mse_loss(model(x), y))
    norm = ctx.clip_grad_norm_(model.parameters(), max_norm=1e9)
    assert torch.allclose(norm, true_norm, rtol=1e-4)
    ctx.step(opt)  # unscaled once: the scaler does not unscale again
    expected = reference.weight.detach() - 0.1 * reference.weight.grad
    assert torch.allclose(model.weight, expected, atol=1e-6)


def test_an_optimizer_built_elsewhere_takes_optimizer_impl_with_its_parameter_groups():
    """An optimizer the model builds itself (two parameter groups: decay and no decay), adopted through
    ctx.prepare: the same object, in the recipe's optimizer_impl, each group keeping its weight_decay; the
    knob is read (the preflight's check passes) and recorded as what acted."""
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    ctx = script_context(optimizer_impl="foreach")
    net, adopted, own_sched = ctx.prepare(model, opt, sched)
    assert adopted is opt and own_sched is sched  # schedule: script keeps the script's scheduler
    assert [g["foreach"] for g in opt.param_groups] == [True, True]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert "optimizer_impl" in ctx.read and ctx.applied["optimizer_impl"] == "foreach"
    assert ctx.applied["optimizer"] == "script" and ctx.applied["optimizer_class"] == "AdamW"

    searched = script_context(optimizer="sgd", optimizer_impl="foreach")  # the space searches the optimizer
    rebuilt = searched.optimizer(opt)
    assert isinstance(rebuilt, torch.optim.SGD) and [g["weight_decay"] for g in rebuilt.param_groups] == [0.1, 0.0]
    assert rebuilt.defaults["foreach"] and searched.applied["optimizer"] == "sgd"


def test_schedule_script_keeps_the_scripts_lr_function_and_a_searched_schedule_replaces_it():
    """The script's own warm-up + cosine to a floor, its peak read from ctx.lr(): under `schedule: script` (a
    script's default) ctx.lr_at gives the script's function, at the searched peak; under a searched `cosine`,
    autospeed's (to 0) instead. ctx.scheduler(own=...) keeps the script's scheduler the same way."""
    ctx = script_context(lr=0.2)  # the searched lr; the script's default was another
    assert ctx.recipe.schedule == "script"  # a script's own way unless the space searches it
    peak = ctx.lr()

    def get_lr(step):  # the script's: linear warm-up over 2 steps, cosine to a floor of peak/10 by step 10
        if step < 2:
            return peak * (step + 1) / 2
        return peak / 10 + 0.5 * (peak - peak / 10) * (1 + math.cos(math.pi * min(1.0, (step - 2) / 8)))

    assert [ctx.lr_at(s, get_lr) for s in range(12)] == [get_lr(s) for s in range(12)]
    assert get_lr(1) == 0.2 and ctx.applied["schedule"] == "script"
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    own = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: get_lr(s) / peak)
    assert ctx.scheduler(opt, own=own) is own

    cosine = script_context(lr=0.2, schedule="cosine")
    lrs = [cosine.lr_at(s, get_lr, total_steps=10) for s in range(11)]
    assert lrs[0] == pytest.approx(0.2) and lrs[10] == pytest.approx(0.0, abs=1e-9)  # autospeed's: to 0
    assert cosine.scheduler(opt, total_steps=10, own=own) is not own


def test_schedule_and_optimizer_script_are_for_a_script_only():
    """A built-in workload has no script whose ways to keep: one clear line naming the fix."""
    with pytest.raises(ValueError, match="schedule 'script' keeps a user script's own schedule"):
        Recipe(workload="mnist1d", schedule="script")


def test_a_kept_autocast_object_is_entered_again_and_again():
    """`fwd = ctx.autocast()` kept and reused each step, with the attention backend pinned (the context that
    broke when entered twice)."""
    ctx = script_context(precision="bf16", attention="math")
    fwd = ctx.autocast()
    assert ctx.autocast() is fwd
    for _ in range(3):
        with fwd:
            assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


# ---------------------------------------------------------------- the script as written is the baseline
OWN_SCRIPT = '''
import json, torch, autospeed
from torch import nn
ctx = autospeed.init(defaults={"batch_size": 16, "lr": 0.3, "epochs": 2, "eval_every_epochs": 1, "seed": 7,
                               "target_accuracy": 0.5})
with open("seen.jsonl", "a") as f:  # a relative path: the script's working directory
    f.write(json.dumps({"batch_size": ctx.config.batch_size, "lr": ctx.lr(), "schedule": ctx.config.schedule,
                        "target": ctx.recipe.resolved_target.value}) + "\\n")
model = nn.Linear(4, 2)
opt = ctx.optimizer(torch.optim.SGD, model.parameters(), lr=ctx.lr())
x, y = torch.randn(16, 4), torch.zeros(16, dtype=torch.long)
for _ in range(3):  # its own loop and batches: no ctx.steps
    ctx.backward(nn.functional.cross_entropy(model(x), y))
    ctx.step(opt)
'''


def test_a_searched_baseline_is_the_scripts_own_defaults_and_runs_where_the_search_started(tmp_path, monkeypatch):
    """A space file that names no baseline knob: the preflight runs the script with its own defaults under the
    file's target, and the baseline is exactly those defaults (the script's schedule and optimizer its own); a
    trial changes only what the space searches. Every run of the script starts in the folder the search
    started from, wherever the process that runs it stands (a Ray trial's is its trial folder), so its
    relative paths hold."""
    import io
    import json

    from autospeed.run_recipe import train
    from autospeed.script.preflight import check_script_reads
    from autospeed.space import SearchSpec, spec_from_dict

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(OWN_SCRIPT)
    monkeypatch.chdir(work)
    spec = spec_from_dict({"name": "own", "workload": "script", "workload_options": {"script": "train.py"},
                           "target_accuracy": 0.9, "budget": {"max_train_seconds": 20},
                           "space": {"lr": {"loguniform": [0.01, 1.0]}}}, "space.yaml")
    searched = check_script_reads(spec, "space.yaml", console=io.StringIO())
    searched = SearchSpec.model_validate_json(searched.model_dump_json())  # as a Ray trial receives it
    baseline = searched.recipe_for({}, baseline=True)
    own = {"batch_size": 16, "lr": 0.3, "epochs": 2, "eval_every_epochs": 1, "seed": 7, "schedule": "script",
           "optimizer": "script"}
    assert {k: getattr(baseline, k) for k in own} == own
    assert baseline.resolved_target.value == 0.9 and baseline.max_train_seconds == 20  # the file's
    trial = searched.recipe_for({"lr": 0.05})
    assert {k: getattr(trial, k) for k in own} == {**own, "lr": 0.05}
    assert json.loads((work / "seen.jsonl").read_text()) == {"batch_size": 16, "lr": 0.3, "schedule": "script",
                                                             "target": 0.9}  # the preflight ran the script's own
    assert searched.script_workdir == str(work)

    elsewhere = tmp_path / "trial_folder"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # where Ray puts a trial's process
    monkeypatch.setenv(channel.WORKDIR, searched.script_workdir)  # as the trial sets it from the spec
    result = train(trial.model_copy(update={"device": "cpu"}))
    assert result.status.value == "not_reached" and result.steps == 3, result.error
    assert json.loads((work / "seen.jsonl").read_text().splitlines()[-1])["lr"] == 0.05
    assert not (elsewhere / "seen.jsonl").exists()


def test_a_space_file_cannot_set_what_the_preflight_reads_from_the_script():
    from autospeed.errors import UserError
    from autospeed.space import spec_from_dict

    with pytest.raises(UserError, match="space.yaml: key 'script_defaults': not a file key"):
        spec_from_dict({"name": "x", "target_accuracy": 0.9, "script_defaults": {"lr": 1}, "space": {}},
                       "space.yaml")


def test_step_with_batches_from_a_function_or_inside_accumulate():
    """`ctx.steps(get_batch)` (a function, endless) and `with ctx.accumulate(model):` (batches from anywhere):
    each is one micro-batch, and ctx.step steps on every accumulation_steps-th."""
    g = torch.Generator().manual_seed(0)

    def get_batch():
        return torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)

    for shape in ("steps", "accumulate"):
        ctx = script_context(accumulation_steps=2)
        model = nn.Linear(4, 1)
        ctx.optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
        stepped = []
        batches = ctx.steps(get_batch) if shape == "steps" else (get_batch() for _ in range(6))
        for i, (x, y) in enumerate(batches):
            with ctx.accumulate(model) if shape == "accumulate" else contextlib.nullcontext():
                ctx.backward(nn.functional.mse_loss(model(x), y))
            stepped.append(ctx.step())  # no arguments: the optimizer the context adopted
            if i == 5:
                break
        assert stepped == [False, True] * 3 and ctx.step_count == 3, shape


def test_prepare_keeps_the_scripts_loader_batch_size_unless_someone_set_one():
    """ctx.prepare(loader) on a script whose defaults name no batch_size: run alone, its loader's own batch size
    (nothing of the script's silently replaced), which becomes a default of the script's (a search's base);
    under a recipe that sets one (a trial), the recipe's. An evaluation loader (unshuffled) comes back as is."""
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    train, val = DataLoader(data, batch_size=8, shuffle=True), DataLoader(data, batch_size=32)
    alone = autospeed.init(defaults={"lr": 0.1})
    loader, same = alone.prepare(train, val)
    assert loader.batch_size == 8 and alone.script_defaults["batch_size"] == 8 and same is val
    trial = script_context(batch_size=4)
    assert trial.prepare(train).batch_size == 4


def test_a_loop_over_ctx_steps_reads_epochs_and_the_evaluation_cadence_before_its_first_step():
    """The preflight asks which knobs the script read by its first optimizer step: a loop over ctx.steps(loader)
    has read epochs and the evaluation cadence by then, so a space may search them."""
    from torch.utils.data import TensorDataset

    ctx = script_context(batch_size=8)
    loader = ctx.dataloader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)))
    next(iter(ctx.steps(loader)))
    assert {"epochs", "eval_every_epochs", "eval_every_steps", "accumulation_steps"} <= ctx.read


def test_prepare_model_gives_fp32_outputs_unless_asked_to_leave_them_as_autocast_made_them():
    """bf16: the prepared model's outputs come back in fp32 (Accelerate's default), or, with
    fp32_outputs=False, in bf16 (no fp32 copy of a large model's logits)."""
    x = torch.randn(2, 4)
    for fp32_outputs, dtype in ((True, torch.float32), (False, torch.bfloat16)):
        ctx = script_context(precision="bf16")
        net = ctx.prepare_model(nn.Linear(4, 3), fp32_outputs=fp32_outputs)
        assert net(x).dtype == dtype


def test_grad_scaler_keeps_a_gradscaler_loop_as_written_and_steps_at_every_kth_micro_batch():
    """A loop written with torch's GradScaler keeps it, built by ctx.grad_scaler(): under fp16 the clipping after
    unscale_ sees the true norm, and scaler.step / scaler.update step at each accumulation_steps-th micro-batch."""
    model, x, y, reference = _a_model_and_its_gradient()
    true_norm = torch.cat([p.grad.flatten() for p in reference.parameters()]).norm()

    ctx = script_context(precision="fp16", accumulation_steps=2)
    scaler = ctx.grad_scaler()
    assert scaler.is_enabled() and scaler.get_scale() > 1
    opt = ctx.optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    for half in (slice(0, 8), slice(8, 16)):  # two micro-batches, each loss divided by 2 as such a loop does
        scaler.scale(nn.functional.mse_loss(model(x[half]), y[half]) / 2).backward()
    scaler.unscale_(opt)
    assert torch.allclose(nn.utils.clip_grad_norm_(model.parameters(), 1e9), true_norm, rtol=1e-4)
    scaler.step(opt)
    scaler.update()
    assert ctx.step_count == 1 and model.weight.grad is None
    assert torch.allclose(model.weight, reference.weight.detach() - 0.1 * reference.weight.grad, atol=1e-6)


def test_train_of_a_hand_written_recipe_keeps_the_scripts_own_defaults_for_what_the_file_leaves_out(tmp_path, run_cli):
    """`autospeed train --script train.py --config mine.yaml`, the file naming only a target, a budget and an lr:
    the script trains as its author runs it (its batch 16, its own schedule) with the file's lr and target, not
    with autospeed's generic defaults (batch 128) for every key the file left out."""
    import json

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(OWN_SCRIPT)
    (work / "mine.yaml").write_text("target_accuracy: 0.8\nmax_train_seconds: 20\nlr: 0.1\ndevice: cpu\n")
    p = run_cli("train", "--script", "train.py", "--config", "mine.yaml", "--json", "--no-track", cwd=work)
    assert p.returncode == 0, p.stderr
    seen = [json.loads(line) for line in (work / "seen.jsonl").read_text().splitlines()]
    assert seen[-1] == {"batch_size": 16, "lr": 0.1, "schedule": "script", "target": 0.8}, seen
    said = next(line for line in p.stderr.splitlines() if line.startswith("preflight: mine.yaml gives"))
    assert "gives device, lr, max_train_seconds, target_accuracy; the rest is" in said and "batch_size=16" in said
    assert json.loads(p.stdout)["steps"] == 3
