"""Converting a public script in a few lines (issue 42's obstacles, experiments/results/public_scripts.md notes):
the training loader named whatever its sampler, the context from inside a function, a prepared model that saves
the script's own checkpoint keys, a per-epoch scheduler stepped per epoch, a script without an optimizer object,
a reseed after init said by the preflight, quiet after-work, and an iteration script's length in steps.

In-process contexts on the CPU (milliseconds each), and two script runs (a second or two each)."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import autospeed
from autospeed.outcome import Status
from autospeed.recipe import Recipe
from autospeed.run_recipe import train
from autospeed.script import channel
from autospeed.script import context as context_module
from autospeed.script.context import Context, script_recipe
from autospeed.script.runner import preflight_knobs
from autospeed.show.live import TrainProgress
from tests.script.test_context import script_recipe as run_recipe


@pytest.fixture(autouse=True)
def _alone(monkeypatch):
    for key in channel.ENV_KEYS:
        monkeypatch.delenv(key, raising=False)


def script_context(**knobs) -> Context:
    return Context(script_recipe({"device": "cpu", "lr": 0.1, "batch_size": 8}, knobs))


def data(n: int = 64) -> TensorDataset:
    return TensorDataset(torch.randn(n, 4), torch.randn(n, 1))


def train_steps(ctx: Context, model: nn.Module, opt, loader, steps: int) -> None:
    """The script's own loop, as pytorch/examples' mnist writes it: batches straight from its loader."""
    for i, (x, y) in enumerate(loader):
        if i == steps:
            return
        ctx.backward(nn.functional.mse_loss(model(x), y))
        ctx.step(opt)


def test_the_first_loader_given_trains_even_when_it_does_not_shuffle_and_epochs_are_never_steps():
    """mnist on a CPU: its training loader does not shuffle. Given first to ctx.prepare it is the training loader
    (rebuilt at the searched batch size, still in order), the evaluation loader after it comes back as is, and an
    evaluation after 8 steps is at epoch 1 (8 steps an epoch), not at "epoch 8". A script whose batches say no
    epoch shows its steps, never steps as epochs."""
    ctx = script_context(batch_size=4)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader, test_loader = DataLoader(data(32), batch_size=16), DataLoader(data(), batch_size=64)
    model, opt, loader, same = ctx.prepare(model, opt, train_loader, test_loader)
    assert loader.batch_size == 4 and same is test_loader
    assert not isinstance(loader.sampler, torch.utils.data.RandomSampler)  # its order kept
    train_steps(ctx, model, opt, loader, 8)
    ctx.report(val_accuracy=0.5)
    event = ctx.record.history[-1] if ctx.record.history else None
    assert ctx.steps_per_epoch == 8 and ctx.record.epochs_done() == 1.0, event

    own = script_context()  # batches of its own: no loader says how long an epoch is
    lin = nn.Linear(4, 1)
    sgd = own.optimizer(torch.optim.SGD, lin.parameters(), lr=0.1)
    train_steps(own, lin, sgd, DataLoader(data(), batch_size=8), 5)
    bar = TrainProgress(60, 2, own.recipe.resolved_target, live=False)
    shown = bar.line(_event(own, step=5))
    assert own.record.epochs_done() == 0.0 and "step 5" in shown and "epoch" not in shown, shown


def _event(ctx: Context, step: int):
    from autospeed.train.result import EvalEvent

    return EvalEvent(step=step, epoch=ctx.record.epochs_done(), samples=8 * step, train_seconds=1.0,
                     wall_seconds=1.0, metrics={"val_accuracy": 0.5}, value=0.5, best_value=0.5, train_loss=0.1,
                     samples_per_second=1.0, reached=False, compile_seconds=0.0, peak_memory_mb=None, objective=1.0)


def test_the_context_is_reachable_from_inside_a_function_and_not_before_init(monkeypatch):
    """mnist steps inside `train(args, model, ...)`: autospeed.context() is the run's context there; before
    autospeed.init it says what to call."""
    monkeypatch.setattr(context_module, "_current", None)
    with pytest.raises(RuntimeError, match=r"autospeed.init"):
        autospeed.context()
    ctx = autospeed.init(defaults={"lr": 0.1})
    assert autospeed.context() is ctx


def test_a_rebound_prepared_model_saves_and_loads_the_scripts_own_checkpoint_keys():
    """`model = ctx.prepare(model)`: the file `torch.save(model.state_dict(), ...)` writes has the keys it had
    before the conversion (no wrapper prefix), and loading it into the prepared model works."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    keys = list(model.state_dict())
    prepared = script_context().prepare(model)
    assert list(prepared.state_dict()) == keys
    saved = {k: torch.zeros_like(v) for k, v in prepared.state_dict().items()}
    prepared.load_state_dict(saved)
    assert all(not p.detach().any() for p in model.parameters())


def test_a_per_epoch_scheduler_given_to_prepare_is_stepped_where_the_script_steps_it(capfd):
    """mnist's StepLR steps once an epoch. Given to ctx.prepare, ctx.step leaves it alone: the LR holds through an
    epoch's steps and falls at the script's own sched.step(). Under a searched schedule the recipe's moves at each
    optimizer step and the script's per-epoch step does nothing. A scheduler of the script's that nothing stepped
    past the first epoch is said once at the end; a run that ended within its first epoch (mnist met its target
    there) says nothing."""
    ctx = script_context()
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, sched = ctx.prepare(model, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5))
    train_steps(ctx, model, opt, DataLoader(data(), batch_size=8), 4)
    assert opt.param_groups[0]["lr"] == 0.1
    sched.step()  # the script's, at the epoch's end
    assert opt.param_groups[0]["lr"] == 0.05

    searched = script_context(schedule="linear", epochs=1)
    lin = nn.Linear(4, 1)
    sgd = torch.optim.SGD(lin.parameters(), lr=0.1)
    lin, sgd, loader, stand_in = searched.prepare(lin, sgd, DataLoader(data(), batch_size=8, shuffle=True),
                                                  torch.optim.lr_scheduler.StepLR(sgd, step_size=1, gamma=0.5))
    train_steps(searched, lin, sgd, loader, 4)
    at_four = sgd.param_groups[0]["lr"]
    assert at_four < 0.1
    stand_in.step()
    assert sgd.param_groups[0]["lr"] == at_four

    for steps, said in ((4, False), (5, True)):  # 4 steps an epoch: a per-epoch scheduler is stepped by the 5th
        forgotten = script_context()
        lin = nn.Linear(4, 1)
        sgd = torch.optim.SGD(lin.parameters(), lr=0.1)
        loader = DataLoader(data(32), batch_size=8)
        lin, sgd, loader, _ = forgotten.prepare(lin, sgd, loader, torch.optim.lr_scheduler.StepLR(sgd, step_size=1))
        train_steps(forgotten, lin, sgd, [*loader, *loader], steps)
        forgotten.finish()
        err = capfd.readouterr().err
        assert (f"your StepLR (given to ctx.prepare) was never stepped in {steps} optimizer steps" in err) == said


def test_an_optimizer_built_at_the_scripts_lr_takes_the_searched_lr():
    """mnist builds Adadelta at its own --lr before converting anything: adopted, the groups at the lr its
    defaults give take the run's (a searched lr reaches it), and a scheduler built on it follows."""
    ctx = Context(script_recipe({"device": "cpu", "lr": 1.0}, {"lr": 0.5}), script_defaults={"lr": 1.0})
    model = nn.Linear(4, 1)
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    own = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    _, opt, own = ctx.prepare(model, opt, own)
    assert opt.param_groups[0]["lr"] == 0.5 and own.base_lrs == [0.5]


def test_a_script_without_an_optimizer_object_reads_as_its_own_optimizer_not_a_failed_knob():
    """word_language_model updates its parameters itself: ctx.backward and ctx.step() with no optimizer. Its
    result says the script's own optimizer and schedule acted, and nothing is listed as not applied."""
    ctx = script_context()
    model = nn.Linear(4, 1)
    for x, y in DataLoader(data(16), batch_size=8):
        ctx.backward(nn.functional.mse_loss(model(x), y))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-0.1)
        ctx.step()
    result = ctx.finish()
    assert result.applied["optimizer"] == "script" and result.applied["schedule"] == "script"
    assert result.applied["not_applied"] == {}, result.applied["not_applied"]


def test_an_evaluation_in_the_scripts_own_loop_is_off_the_train_clock():
    """mnist's test() runs the prepared model in eval mode under no_grad between epochs, with no ctx.paused():
    the clock stops at that forward and starts again at the next training forward."""
    ctx = script_context()
    model = nn.Linear(4, 1)
    net, opt = ctx.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(8, 4)
    ctx.backward(net(x).pow(2).mean())
    ctx.step(opt)
    assert ctx.clock.running
    net.eval()
    with torch.no_grad():
        net(x)
    assert not ctx.clock.running
    net.train()
    net(x).pow(2).mean()
    assert ctx.clock.running


def test_an_iteration_script_runs_its_max_steps_searched_longer_or_shorter():
    """An iteration loop's length is its steps: `max_steps` in the defaults (nanoGPT's max_iters), the schedule's
    end (ctx.lr_at needs no total_steps), the end of ctx.steps(get_batch), and `autospeed train` shows steps of
    it. A searched max_steps lengthens the run as well as shortening it."""
    ctx = script_context(max_steps=6, schedule="linear")
    model = nn.Linear(4, 1)
    opt = ctx.optimizer(torch.optim.SGD, model.parameters(), lr=ctx.lr())
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    stepped = 0
    for _ in ctx.steps(lambda: (x, y)):
        ctx.backward(nn.functional.mse_loss(model(x), y))
        stepped += ctx.step(opt)
    assert stepped == 6 and ctx.lr_at(6, lambda s: 1.0) == 0.0  # the linear schedule ends at step 6
    assert ctx.config.max_steps == 6 and "max_steps" in ctx.read
    assert ctx.report(val_accuracy=0.5) == (True, "schedule")
    bar = TrainProgress(60, 10, ctx.recipe.resolved_target, live=False, max_steps=6)
    assert "step 3/6" in bar.line(_event(ctx, step=3))
    with pytest.raises(ValueError, match="max_steps is for a user's script"):  # a built-in workload has epochs
        Recipe(workload="mnist1d", max_steps=6)


RESEEDING = textwrap.dedent('''
    import torch, autospeed
    from torch import nn
    ctx = autospeed.init(defaults={"lr": 0.1, "batch_size": 4})
    torch.manual_seed(1)  # the script's own seed, after init
    model = nn.Linear(2, 1)
    opt = ctx.optimizer(torch.optim.SGD, model.parameters(), lr=ctx.lr())
    ctx.backward(model(torch.randn(4, 2)).sum())
    ctx.step(opt)
''')


def test_the_preflight_notices_a_script_that_seeds_itself_after_init(tmp_path):
    """All three public scripts call torch.manual_seed after autospeed.init: the confirmation's seeds never
    reach them. The preflight sees the seed (its own is one no script picks), and not when the script seeds
    with ctx.config.seed."""
    script = tmp_path / "reseeds.py"
    recipe = run_recipe(script, device="cpu")
    recipe.workload_options["args"] = []
    for line, seen in (("torch.manual_seed(1)", 1), ("torch.manual_seed(ctx.config.seed)", None)):
        script.write_text(RESEEDING.replace("torch.manual_seed(1)", line))
        run = preflight_knobs(recipe, {"workload": "script", "device": "cpu"})
        assert run.knobs_read is not None and run.reseeded == seen, (line, run.result.error)


def test_short_after_work_passes_without_a_word(tiny_script, capfd):
    """A script that reports its result, then runs a final test pass and exits: the run says nothing about it
    (the line is kept for after-work that lasts: test_a_script_that_goes_on_after_its_result_keeps_it)."""
    result = train(run_recipe(tiny_script, "--after-work-pass", target_accuracy=0.5, epochs=20))
    assert result.status == Status.REACHED, result.error
    assert "goes on" not in capfd.readouterr().err
