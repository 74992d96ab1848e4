"""The trainer on CPU: every knob runs, statuses are right, the clock is honest."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from autospeed.recipe import Recipe
from autospeed.train.applied import Applied
from autospeed.train.trainer import EvalEvent, train
from autospeed.workloads import load_workload

# Digits with these settings reaches ~0.95 validation accuracy in 2-3 epochs, in well under a second.
FAST = dict(workload="digits", target_accuracy=0.95, max_train_seconds=30, epochs=3, eval_every_epochs=1,
            batch_size=32, lr=0.1, seed=0)


def recipe(**overrides) -> Recipe:
    return Recipe(**{**FAST, **overrides})


@pytest.fixture(scope="module")
def digits():
    return load_workload("digits")


def capture_model(workload):
    """The workload with build_model recorded, so a test can read the trained parameters."""
    built = []

    def build():
        built.append(workload.build_model())
        return built[-1]

    return dataclasses.replace(workload, build_model=build), built


# ---------------------------------------------------------------- every knob runs
KNOBS = [
    {"precision": "fp32"},
    {"precision": "tf32"},
    {"precision": "bf16"},
    {"precision": "fp16"},
    {"schedule": "constant", "warmup_fraction": 0.2},
    {"schedule": "cosine"},
    {"schedule": "cosine", "warmup_fraction": 0.2},
    {"schedule": "onecycle"},
    {"schedule": "linear", "warmup_fraction": 0.2},
    {"optimizer": "sgd", "momentum": 0.0, "lr": 0.5},  # plain SGD: no momentum, so a larger step
    {"optimizer": "adamw", "lr": 0.003},
    {"optimizer": "adamw", "lr": 0.003, "optimizer_impl": "fused"},
    {"optimizer": "sgd", "optimizer_impl": "fused"},
    {"optimizer": "sgd", "optimizer_impl": "foreach"},
    {"optimizer": "muon", "lr": 0.01},  # Muon on the MLP's hidden weight, AdamW on the rest
    {"data_loader": "device"},
    {"data_loader": "dataloader", "num_workers": 0},
    {"data_loader": "dataloader", "num_workers": 1, "prefetch_factor": 4, "persistent_workers": True,
     "pin_memory": True},
    {"accumulation_steps": 2},
    {"accumulation_steps": 4, "batch_size": 8},
    {"label_smoothing": 0.1},
    {"activation_checkpointing": True},
    {"channels_last": True},
    {"cudnn_benchmark": True},
]


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_every_knob_value_trains(digits, knobs):
    # The epochs end the run, never the clock: a loaded machine must not cut a slow knob short.
    result = train(recipe(target_accuracy=1.0, max_train_seconds=3600, **knobs), digits)

    assert result.error is None
    assert result.status == "not_reached"  # target 1.0: runs all 3 epochs
    assert result.epochs_done == pytest.approx(3.0)
    assert result.best_val_accuracy > 0.6, "the model should learn with every knob (chance is 0.1)"
    assert result.applied["device"] == "cpu"
    asked = knobs.get("precision", "fp32")
    assert result.applied["precision"] == ("fp32" if asked == "tf32" else asked)  # TF32 is CUDA's
    assert result.applied["data_loader"] == knobs.get("data_loader", "device")
    assert result.applied["accumulation_steps"] == knobs.get("accumulation_steps", 1)
    assert result.applied["optimizer_impl"] == knobs.get("optimizer_impl", "default")


def test_knobs_that_cannot_apply_on_cpu_are_recorded_as_not_applied(digits):
    result = train(recipe(precision="tf32", channels_last=True, cudnn_benchmark=True, data_loader="dataloader",
                          pin_memory=True, schedule="onecycle", warmup_fraction=0.1, epochs=1), digits)

    assert result.error is None
    assert set(result.applied) <= set(Applied.__annotations__)  # every field named where the record is defined
    assert result.applied["tf32"] is False and result.applied["precision"] == "fp32"
    assert result.applied["channels_last"] is False
    assert result.applied["cudnn_benchmark"] is False
    assert result.applied["pin_memory"] is False
    assert result.applied["warmup_fraction"] == "not_applicable"  # onecycle warms up its own way
    assert result.applied["not_applied"] == {
        "precision": {"asked": "tf32", "ran": "fp32"}, "channels_last": {"asked": True, "ran": False},
        "cudnn_benchmark": {"asked": True, "ran": False}, "pin_memory": {"asked": True, "ran": False},
        "warmup_fraction": {"asked": 0.1, "ran": "not_applicable"},
        "momentum": {"asked": 0.9, "ran": "0.85-0.95 (onecycle)"}}


def test_loader_knobs_on_device_resident_data_are_recorded_as_not_applied(digits):
    """`data_loader: device` slices batches on the device: no DataLoader, so no loader workers."""
    resident = train(recipe(data_loader="device", num_workers=2, prefetch_factor=4, persistent_workers=True,
                            epochs=1), digits)
    loader = train(recipe(data_loader="dataloader", num_workers=1, prefetch_factor=4, persistent_workers=True,
                          epochs=1), digits)

    assert resident.error is None and loader.error is None
    assert (resident.applied["num_workers"], resident.applied["prefetch_factor"],
            resident.applied["persistent_workers"]) == (0, "not_applicable", False)
    assert set(resident.applied["not_applied"]) == {"num_workers", "prefetch_factor", "persistent_workers"}
    assert (loader.applied["num_workers"], loader.applied["prefetch_factor"],
            loader.applied["persistent_workers"]) == (1, 4, True)
    assert loader.applied["not_applied"] == {}


def test_momentum_under_onecycle_records_the_cycled_momentum_that_acted(digits):
    """OneCycleLR cycles the momentum itself (cycle_momentum): the recipe's momentum changes nothing, and
    `applied` says what acted instead; under another schedule the recipe's momentum acts."""
    def run(schedule: str, momentum: float):
        return train(recipe(schedule=schedule, momentum=momentum, epochs=1, target_accuracy=1.0), digits)

    onecycle_low, onecycle_high = run("onecycle", 0.5), run("onecycle", 0.9)
    constant_low, constant_high = run("constant", 0.5), run("constant", 0.9)

    def trajectory(result):
        return [(h["train_loss"], h["val_loss"], h["val_accuracy"]) for h in result.history]

    assert trajectory(onecycle_low) == trajectory(onecycle_high)  # bit for bit: the recipe's momentum did nothing
    assert trajectory(constant_low) != trajectory(constant_high)  # the comparison has power
    for result in (onecycle_low, onecycle_high):
        assert result.applied["momentum"] == "0.85-0.95 (onecycle)"
        assert result.applied["not_applied"]["momentum"]["ran"] == "0.85-0.95 (onecycle)"
    assert constant_high.applied["momentum"] == 0.9 and "momentum" not in constant_high.applied["not_applied"]


def test_autocast_and_scaler_are_recorded(digits):
    bf16 = train(recipe(precision="bf16", epochs=1), digits)
    fp16 = train(recipe(precision="fp16", epochs=1), digits)
    fp32 = train(recipe(precision="fp32", epochs=1), digits)

    assert (bf16.applied["autocast"], bf16.applied["grad_scaler"]) == ("bfloat16", False)
    assert (fp16.applied["autocast"], fp16.applied["grad_scaler"]) == ("float16", True)
    assert (fp32.applied["autocast"], fp32.applied["grad_scaler"]) == ("none", False)


def test_activation_checkpointing_recomputes_the_blocks_in_backward_and_keeps_the_maths(digits):
    """Checkpointed blocks run their forward twice per micro-step (once more in the backward
    pass), and training ends with the same parameters as without checkpointing."""
    def run(checkpointing: bool):
        workload, built = capture_model(digits)
        calls = []

        def build():
            model = workload.build_model()
            for block in model.checkpoint_blocks:
                # a pre-hook: the recompute stops early, inside the forward, once it has what backward needs
                block.register_forward_pre_hook(lambda module, args: calls.append(module.training))
            return model

        result = train(recipe(activation_checkpointing=checkpointing, epochs=1, eval_every_epochs=1,
                              target_accuracy=0.999), dataclasses.replace(workload, build_model=build))
        return result, sum(calls), built[-1]

    plain, plain_calls, plain_model = run(False)
    ckpt, ckpt_calls, ckpt_model = run(True)
    assert (plain.applied["activation_checkpointing"], ckpt.applied["activation_checkpointing"]) == (False, True)
    assert plain.steps == ckpt.steps > 0
    blocks = len(plain_model.checkpoint_blocks)
    assert plain_calls == blocks * plain.steps and ckpt_calls == 2 * blocks * ckpt.steps
    for a, b in zip(plain_model.parameters(), ckpt_model.parameters()):
        torch.testing.assert_close(a, b)


def test_compile_default_trains_the_conv_net_under_bf16_and_reports_compile_seconds():
    # The one compile test (torch.compile takes ~15 s on this CPU): the compile time is on the train
    # clock and also reported on its own. The model is the built-in conv net under bf16 autocast:
    # compiled amax's backward gave NaN gradients there (pytorch#186799), so compiled bf16 diverged.
    # The run ends at its 2 epochs, never at its budget: the compile is on the train clock, and a cold compile
    # under the suite's load once took the whole of a 30 s budget, leaving one step (best accuracy 0.18).
    synthetic = load_workload("synthetic", {"num_samples": 256, "image_size": 8, "noise": 1.0, "widths": [8, 16]})
    result = train(recipe(workload="synthetic", compile="default", precision="bf16", epochs=2, batch_size=32,
                          lr=0.05, target_accuracy=1.0, max_train_seconds=3600), synthetic)

    assert result.error is None
    assert result.status == "not_reached"  # not diverged: every gradient stayed finite
    assert result.epochs_done == 2 and result.evaluations == 2  # whatever the compile cost, both epochs trained
    assert result.applied["compile"] == "default" and result.applied["autocast"] == "bfloat16"
    assert result.compile_seconds > 0
    assert result.compile_seconds == result.first_step_seconds
    assert result.train_seconds >= result.compile_seconds
    assert result.best_val_accuracy > 0.3  # it learned (10 classes: chance is 0.1)


def test_eager_run_reports_no_compile_time_but_a_first_step_time(digits):
    result = train(recipe(epochs=1), digits)

    assert result.compile_seconds == 0.0
    assert 0 < result.first_step_seconds <= result.train_seconds


def top_singular_value_ratio(update: torch.Tensor, k: int = 8) -> float:
    """The k-th largest singular value of a weight update over the largest: near 1 for Muon's
    orthogonalised update (its top singular values near-equal), far below for AdamW's or SGD's."""
    s = torch.linalg.svdvals(update.double())
    return float(s[k - 1] / s[0])


def one_step_updates(workload, **knobs) -> tuple[dict[str, torch.Tensor], dict]:
    """Each parameter's update in one optimizer step over the whole training set (no weight decay), and
    the run's `applied`."""
    captured, built = capture_model(workload)
    initial = {}

    def build():
        model = captured.build_model()
        initial.update({name: p.detach().clone() for name, p in model.named_parameters()})
        return model

    result = train(recipe(**{"batch_size": len(workload.train_x), "epochs": 1, "target_accuracy": 1.0,
                             "weight_decay": 0.0, **knobs}), dataclasses.replace(workload, build_model=build))
    assert result.error is None and result.steps == 1
    return {name: p.detach() - initial[name] for name, p in built[-1].named_parameters()}, result.applied


def test_muon_takes_the_hidden_weights_and_adamw_the_rest(digits):
    from autospeed.train.optimizers import muon_split

    model = digits.build_model()
    hidden, rest = muon_split(model)
    # the MLP: two hidden Linear weights for Muon; their biases and the head go to AdamW
    assert [tuple(p.shape) for p in hidden] == [(128, 64), (128, 128)]
    assert sorted(tuple(p.shape) for p in rest) == [(10,), (10, 128), (128,), (128,)]
    assert {id(p) for p in hidden}.isdisjoint(id(p) for p in rest)
    assert len(hidden) + len(rest) == len(list(model.parameters()))

    muon, muon_applied = one_step_updates(digits, optimizer="muon", lr=0.01)
    adamw, adamw_applied = one_step_updates(digits, optimizer="adamw", lr=0.01)
    assert (muon_applied["optimizer"], muon_applied["muon_parameters"]) == ("muon", 128 * 64 + 128 * 128)
    assert adamw_applied["optimizer"] == "adamw"
    for name in ("checkpoint_blocks.0.0.weight", "checkpoint_blocks.1.0.weight"):  # Muon's: orthogonalised
        assert top_singular_value_ratio(muon[name]) > 0.75, name
        assert top_singular_value_ratio(adamw[name]) < 0.6, name
    for name in ("head.weight", "head.bias", "checkpoint_blocks.0.0.bias"):  # AdamW's: AdamW's very step
        torch.testing.assert_close(muon[name], adamw[name], rtol=0, atol=0)


def test_muon_on_a_model_without_hidden_weights_is_recorded_as_the_adamw_it_is():
    """The conv net's only nn.Linear is its head: nothing for Muon, so the run is AdamW, step for step."""
    synthetic = load_workload("synthetic", {"num_samples": 256, "image_size": 8, "noise": 1.0, "widths": [8, 16]})
    runs = {opt: train(recipe(workload="synthetic", optimizer=opt, lr=0.01, batch_size=32, epochs=1,
                              target_accuracy=1.0), synthetic) for opt in ("muon", "adamw")}

    assert runs["muon"].error is None
    assert (runs["muon"].applied["optimizer"], runs["muon"].applied["muon_parameters"]) == ("adamw", 0)
    assert runs["muon"].applied["not_applied"]["optimizer"] == {"asked": "muon", "ran": "adamw"}
    assert [h["train_loss"] for h in runs["muon"].history] == [h["train_loss"] for h in runs["adamw"].history]


# ---------------------------------------------------------------- statuses
def test_digits_reaches_its_target_with_a_tta(digits):
    events: list[EvalEvent] = []
    result = train(recipe(epochs=10, eval_every_epochs=0.5), digits, on_eval=events.append)

    assert result.status == "reached"
    assert result.best_val_accuracy >= 0.95
    reaching = next(e for e in events if e.val_accuracy >= 0.95)
    assert events[-1] is reaching, "the run stops at the first evaluation at or above the target"
    assert result.tta_seconds == reaching.train_seconds == result.train_seconds
    assert 0 < result.tta_seconds <= result.wall_seconds
    assert result.evaluations == len(events) == len(result.history)
    assert result.epochs_done < 10


def test_eval_events_advance_and_carry_the_measurements(digits):
    events: list[EvalEvent] = []
    result = train(recipe(target_accuracy=1.0, epochs=2, eval_every_epochs=0.5), digits, on_eval=events.append)

    assert len(events) == 4
    assert [e.epoch for e in events] == pytest.approx([0.5, 1.0, 1.5, 2.0], abs=0.05)
    assert all(a.train_seconds < b.train_seconds for a, b in zip(events, events[1:]))
    assert all(a.step < b.step and a.samples < b.samples for a, b in zip(events, events[1:]))
    assert all(e.samples_per_second > 0 and math.isfinite(e.train_loss) for e in events)
    assert events[-1].best_val_accuracy == max(e.val_accuracy for e in events) == result.best_val_accuracy
    assert result.samples_per_second == pytest.approx(events[-1].samples / result.train_seconds)


def test_impossible_target_ends_not_reached_at_the_time_budget(digits):
    result = train(recipe(target_accuracy=1.0, max_train_seconds=0.3, epochs=10_000, eval_every_epochs=5), digits)

    assert result.status == "not_reached"
    assert result.tta_seconds is None
    assert result.train_seconds >= 0.3
    assert result.train_seconds < 0.3 + 2.0, "the budget is checked every step, not only at evaluations"
    assert result.epochs_done < 10_000


def test_impossible_target_ends_not_reached_when_epochs_run_out(digits):
    result = train(recipe(target_accuracy=1.0, epochs=2, eval_every_epochs=1.5), digits)

    assert result.status == "not_reached"
    assert result.epochs_done == pytest.approx(2.0)
    assert result.evaluations == 2  # at epoch 1.5 and the final one at 2.0


def test_on_eval_returning_true_stops_the_run_early(digits):
    result = train(recipe(target_accuracy=1.0, epochs=5, eval_every_epochs=1), digits, on_eval=lambda e: True)

    assert result.status == "stopped_early"
    assert result.evaluations == 1
    assert result.epochs_done == pytest.approx(1.0)


def test_a_loss_target_mode_min_is_reached_with_a_tta(digits):
    events: list[EvalEvent] = []
    result = train(recipe(target_accuracy=None, target={"metric": "val_loss", "mode": "min", "value": 0.5},
                          epochs=10, eval_every_epochs=0.5), digits, on_eval=events.append)

    assert result.status == "reached"
    assert result.target == {"metric": "val_loss", "mode": "min", "value": 0.5}
    reaching = next(e for e in events if e.metrics["val_loss"] <= 0.5)
    assert events[-1] is reaching, "the run stops at the first evaluation at or below the target"
    assert all(e.metrics["val_loss"] > 0.5 for e in events[:-1])
    assert result.tta_seconds == reaching.train_seconds
    assert result.best_value == result.best_metrics["val_loss"] == min(e.metrics["val_loss"] for e in events)
    assert result.objective == result.tta_seconds
    assert result.to_dict()["best_val_loss"] == result.best_value and "best_val_accuracy" in result.to_dict()


def test_an_impossible_loss_target_ends_not_reached_with_a_censored_objective(digits):
    result = train(recipe(target_accuracy=None, target={"metric": "val_loss", "mode": "min", "value": 1e-6},
                          epochs=2, eval_every_epochs=1), digits)

    assert result.status == "not_reached" and result.tta_seconds is None
    assert result.best_value == min(h["val_loss"] for h in result.history)
    assert result.objective > result.best_value and result.objective > 30  # censored: above the budget


def test_nan_producing_learning_rate_ends_diverged(digits):
    result = train(recipe(lr=1e6, target_accuracy=1.0), digits)

    assert result.status == "diverged"
    assert result.tta_seconds is None
    assert "loss" in result.error


OOM_PLUGIN = """
    import torch
    from torch import nn
    from autospeed.workloads import load_workload

    class FitsUpTo(nn.Module):
        # An MLP that behaves like a GPU with room for `limit` samples per training batch.
        def __init__(self, limit):
            super().__init__()
            self.limit = limit
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

        def forward(self, x):
            if self.training and x.shape[0] > self.limit:
                raise torch.cuda.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {x.shape[0]} samples (limit {self.limit})")
            return self.net(x)

    def small_gpu(limit: int = 64):
        workload = load_workload("digits")
        workload.build_model = lambda: FitsUpTo(limit)
        return workload
"""


def test_simulated_out_of_memory_ends_oom(write_plugin):
    write_plugin("oom_plugin", OOM_PLUGIN)

    fits = train(recipe(workload="oom_plugin:small_gpu", batch_size=64, epochs=1, target_accuracy=1.0))
    too_big = train(recipe(workload="oom_plugin:small_gpu", batch_size=128, epochs=1, target_accuracy=1.0))

    assert fits.status == "not_reached" and fits.error is None
    assert too_big.status == "oom"
    assert "OutOfMemoryError" in too_big.error
    assert too_big.tta_seconds is None and too_big.steps == 0


def test_error_in_the_model_ends_failed_not_raised(write_plugin):
    write_plugin("broken_plugin", """
        from torch import nn
        from autospeed.workloads import load_workload

        def wrong_width():
            workload = load_workload("digits")
            workload.build_model = lambda: nn.Linear(65, 10)  # digits has 64 features
            return workload
    """)

    result = train(recipe(workload="broken_plugin:wrong_width", epochs=1))

    assert result.status == "failed"
    assert result.error.startswith("RuntimeError")


# ---------------------------------------------------------------- accumulation is exact
@pytest.mark.parametrize("optimizer, data_loader", [("sgd", "device"), ("adamw", "device"), ("sgd", "dataloader")])
def test_accumulation_matches_the_larger_batch(digits, optimizer, data_loader):
    # The digits MLP has no batch-dependent layers, so batch B x k accumulation
    # steps must follow the same trajectory as batch B*k, step for step.
    def final_parameters(batch_size: int, accumulation_steps: int) -> tuple[int, list[torch.Tensor]]:
        workload, built = capture_model(digits)
        result = train(recipe(batch_size=batch_size, accumulation_steps=accumulation_steps, optimizer=optimizer,
                              lr=0.05 if optimizer == "sgd" else 0.003, schedule="cosine", warmup_fraction=0.2,
                              label_smoothing=0.1, target_accuracy=1.0, epochs=2, data_loader=data_loader),
                       workload)
        assert result.status == "not_reached"
        return result.steps, [p.detach().clone() for p in built[0].parameters()]

    steps_accumulated, accumulated = final_parameters(batch_size=16, accumulation_steps=4)
    steps_large, large = final_parameters(batch_size=64, accumulation_steps=1)
    steps_small, small = final_parameters(batch_size=16, accumulation_steps=1)

    assert steps_accumulated == steps_large == 2 * (len(digits.train_x) // 64)
    for a, b in zip(accumulated, large):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # The comparison has power: without accumulation the small batch ends elsewhere.
    assert not all(torch.allclose(a, b, rtol=1e-3, atol=1e-4) for a, b in zip(small, large))


def test_same_seed_same_result(digits):
    first = train(recipe(epochs=1, target_accuracy=1.0), digits)
    second = train(recipe(epochs=1, target_accuracy=1.0), digits)
    other_seed = train(recipe(epochs=1, target_accuracy=1.0, seed=1), digits)

    assert [h["val_accuracy"] for h in first.history] == [h["val_accuracy"] for h in second.history]
    assert first.history[-1]["train_loss"] == second.history[-1]["train_loss"]
    assert first.history[-1]["train_loss"] != other_seed.history[-1]["train_loss"]


# ---------------------------------------------------------------- evaluation is off the train clock
SLOW_EVAL_PLUGIN = """
    import time
    import torch
    from torch import nn
    from autospeed.workloads import Workload

    EVAL_SLEEP_SECONDS = 0.2

    class SlowToEvaluate(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))

        def forward(self, x):
            if not self.training:
                time.sleep(EVAL_SLEEP_SECONDS)  # per evaluation batch
            return self.net(x)

    def slow_eval(num_samples: int = 2000, seed: int = 0) -> Workload:
        g = torch.Generator().manual_seed(seed)
        centers = 0.5 * torch.randn(4, 16, generator=g)  # overlapping blobs: ~0.8 is the best accuracy
        y = torch.randint(0, 4, (num_samples,), generator=g)
        x = centers[y] + torch.randn(num_samples, 16, generator=g)
        n_val = num_samples // 5  # 400: one evaluation batch
        return Workload(name="slow_eval", num_classes=4, train_x=x[n_val:], train_y=y[n_val:],
                        val_x=x[:n_val], val_y=y[:n_val], build_model=SlowToEvaluate)
"""


def test_tta_excludes_evaluation_time(write_plugin):
    write_plugin("slow_eval_plugin", SLOW_EVAL_PLUGIN)

    result = train(recipe(workload="slow_eval_plugin:slow_eval", target_accuracy=0.78, epochs=4,
                          eval_every_epochs=0.25, batch_size=32, lr=0.01))

    assert result.status == "reached"
    assert result.evaluations >= 2
    slept = 0.2 * result.evaluations  # one evaluation batch per evaluation
    assert result.wall_seconds - result.train_seconds >= slept
    assert result.tta_seconds == result.train_seconds
    assert result.tta_seconds <= result.wall_seconds - slept
    # Each evaluation event's train clock lags its wall clock by the evaluations before it.
    for i, event in enumerate(result.history):
        assert event["wall_seconds"] - event["train_seconds"] >= 0.2 * i


# ---------------------------------------------------------------- CUDA graphs and accumulation
@pytest.mark.parametrize("mode,accumulation,device,used", [
    ("reduce-overhead", 2, "cuda", "default"),
    ("max-autotune", 4, "cuda", "max-autotune-no-cudagraphs"),
    ("reduce-overhead", 1, "cuda", "reduce-overhead"),
    ("max-autotune-no-cudagraphs", 2, "cuda", "max-autotune-no-cudagraphs"),
    ("default", 2, "cuda", "default"),
    ("reduce-overhead", 2, "cpu", "default"),  # no CUDA graphs on a CPU: the mode without them is what runs
    ("max-autotune", 1, "cpu", "max-autotune-no-cudagraphs"),
    ("default", 1, "cpu", "default"),
])
def test_cuda_graph_modes_compile_without_cuda_graphs_when_accumulating(mode, accumulation, device, used):
    """CUDA graphs cannot accumulate gradients over micro-batches (pytorch/pytorch#169545, seen on an H100)."""
    from autospeed.train.setup import compile_mode

    assert compile_mode(recipe(compile=mode, accumulation_steps=accumulation), torch.device(device)) == used


# ---------------------------------------------------------------- attention backends
@pytest.mark.parametrize("backend, applied", [("math", "math"), ("flash", "flash"), ("efficient", "auto"),
                                              ("auto", "auto")])
def test_attention_backend_takes_effect_or_is_a_recorded_no_op_on_cpu(backend, applied):
    """CPU has the math and flash kernels of scaled_dot_product_attention, not the efficient one."""
    options = {"width": 32, "depth": 1, "heads": 2, "context": 32, "corpus_bytes": 40_000}
    result = train(Recipe(workload="lm", workload_options=options, optimizer="adamw", lr=0.003, batch_size=16,
                          epochs=0.2, eval_every_epochs=0.2, target_accuracy=1.0, attention=backend))

    assert result.error is None and result.steps > 0
    assert result.applied["attention"] == applied
    assert ("attention" in result.applied["not_applied"]) == (applied != backend)


@pytest.mark.parametrize("backend", ["math", "auto"])
def test_attention_on_a_model_without_scaled_dot_product_attention_is_not_applicable(digits, backend):
    """The digits MLP never calls scaled_dot_product_attention: no backend can act on it."""
    result = train(recipe(attention=backend, epochs=1), digits)

    assert result.error is None
    assert result.applied["attention"] == "not_applicable"
    # `auto` asked for no backend: nothing to report; `math` asked for one that could not act
    expected = {"math": {"attention": {"asked": "math", "ran": "not_applicable"}}, "auto": {}}[backend]
    assert result.applied["not_applied"] == expected


# ---------------------------------------------------------------- micro-batching (micro_batch_size)
def test_auto_micro_batch_trains_a_batch_that_does_not_fit_in_micro_batches(write_plugin):
    """Out of memory at 256 and 128 samples: auto trains micro-batches of 64 with 4x accumulation,
    the same run (same seed, same updates) as asking for batch 64 x accumulation 4 directly."""
    write_plugin("oom_plugin", OOM_PLUGIN)
    small_gpu = dict(workload="oom_plugin:small_gpu", epochs=2, target_accuracy=1.0)

    auto = train(recipe(**small_gpu, batch_size=256, micro_batch_size="auto"))
    split_by_hand = train(recipe(**small_gpu, batch_size=64, accumulation_steps=4))

    assert auto.status == "not_reached" and auto.error is None  # ran its epochs, not oom
    assert auto.applied["micro_batch_size"] == 64
    assert auto.applied["accumulation_steps"] == 4 and auto.applied["effective_batch"] == 256
    assert [h["val_accuracy"] for h in auto.history] == [h["val_accuracy"] for h in split_by_hand.history]
    # the two attempts that ran out of memory are charged to the run's train clock
    assert auto.micro_batch_retry_seconds > 0
    assert auto.train_seconds > auto.micro_batch_retry_seconds
    assert auto.history[0]["train_seconds"] > auto.micro_batch_retry_seconds


def test_int_micro_batch_trains_with_that_micro_batch_and_more_accumulation(digits):
    result = train(recipe(batch_size=64, accumulation_steps=2, micro_batch_size=16, target_accuracy=1.0, epochs=1))

    assert result.error is None
    assert result.applied["micro_batch_size"] == 16 and result.applied["accumulation_steps"] == 8
    assert result.applied["effective_batch"] == 128


def test_auto_micro_batch_that_never_fits_ends_oom(write_plugin):
    write_plugin("oom_plugin", OOM_PLUGIN)

    # 96 -> 48 -> 24 -> 12 -> 6 -> 3: none fits in room for 2 samples
    result = train(recipe(workload="oom_plugin:small_gpu", workload_options={"limit": 2}, batch_size=96,
                          micro_batch_size="auto", epochs=1))

    assert result.status == "oom" and "OutOfMemoryError" in result.error
    assert result.applied["micro_batch_size"] == 3


def test_max_micro_batch_workload_option_simulates_a_memory_limit_on_any_workload():
    limited = {"workload_options": {"max_micro_batch": 32}, "epochs": 1, "target_accuracy": 1.0}

    too_big = train(recipe(batch_size=64, **limited))
    auto = train(recipe(batch_size=64, micro_batch_size="auto", **limited))

    assert too_big.status == "oom" and "max_micro_batch" in too_big.error
    assert auto.status == "not_reached" and auto.applied["micro_batch_size"] == 32


# ---------------------------------------------------------------- lr_scaling
@pytest.mark.parametrize("rule,batch_size,accumulation,expected_lr", [
    ("none", 128, 2, 0.1),
    ("linear", 128, 2, 0.1 * 256 / 64),
    ("linear", 32, 1, 0.1 * 32 / 64),
    ("sqrt", 128, 2, 0.1 * math.sqrt(256 / 64)),
    ("sqrt", 16, 1, 0.1 * math.sqrt(16 / 64)),
])
def test_lr_scaling_trains_with_lr_times_f_of_the_effective_batch(digits, rule, batch_size, accumulation,
                                                                   expected_lr):
    """lr is the peak LR at reference_batch = 64 examples: the scaled run is, bit for bit, the unscaled run
    at lr x f (same seed, same batches), and `applied` records that LR."""
    scaling = {"rule": rule, "reference_batch": 64} if rule != "none" else {"rule": "none"}
    same = dict(batch_size=batch_size, accumulation_steps=accumulation, micro_batch_size=16, epochs=1,
                target_accuracy=1.0)
    scaled = train(recipe(lr=0.1, lr_scaling=scaling, **same), digits)
    by_hand = train(recipe(lr=scaled.applied["lr"], **same), digits)

    assert scaled.error is None and scaled.applied["lr"] == pytest.approx(expected_lr)
    assert [(h["train_loss"], h["val_loss"]) for h in scaled.history] == [
        (h["train_loss"], h["val_loss"]) for h in by_hand.history]
    if rule != "none":  # the comparison has power: at the unscaled lr the run ends elsewhere
        unscaled = train(recipe(lr=0.1, **same), digits)
        assert unscaled.history[-1]["train_loss"] != scaled.history[-1]["train_loss"]
