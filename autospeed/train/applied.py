"""What acted in a run: the `applied` record every training run returns (TrainResult.applied), each field named
once here with what it means, the values that say a knob did not act, and which of the recipe's knobs did not act
as set (`not_applied`). The built-in trainer and a user's script (autospeed.script) write the same record.

Each field holds the value that really acted (docs/design.md "Honest figures"), which may differ from the
recipe's: `precision: fp32` for tf32 on a CPU, `compile: default` for a mode whose CUDA graphs need CUDA. A knob
that did not act holds one of the reasons below. Standard library only: the tracking and display layers read it.
"""

from __future__ import annotations

from typing import Any, TypedDict

NOT_APPLICABLE = "not_applicable"  # the knob cannot act on this model, device or recipe (attention: no SDPA call)
NOT_READ = "not_read"  # a script never read this knob, so it cannot have acted (autospeed.script)
SCRIPT = "script"  # the script's own optimizer or schedule acted: it handed autospeed none
NOT_ACTED = (NOT_APPLICABLE, NOT_READ, False)  # shown as "n/a" in a leaderboard's not-applied marks


class NotApplied(TypedDict):
    asked: Any  # the recipe's value
    ran: Any  # what acted instead: another value, or a reason above


class Applied(TypedDict, total=False):
    """Every field a run's `applied` may hold. A run that failed before setting a knob up records nothing of it."""

    # the device and its backend
    device: str  # the device type: cpu, cuda, mps
    workers: int  # data-parallel processes the run trained on
    ddp: bool  # the model wrapped in DistributedDataParallel
    tf32: bool  # TF32 matmuls on (CUDA only)
    precision: str  # fp32 | tf32 | bf16 | fp16, as it acted
    autocast: str  # the autocast dtype's name (bfloat16, float16) or none
    grad_scaler: bool  # fp16's gradient scaler
    cudnn_benchmark: bool
    # the model
    compile: str  # the torch.compile mode used, or none
    channels_last: bool
    activation_checkpointing: bool
    attention: str  # the SDPA backend, auto, or not_applicable (the model never called SDPA)
    # the batch and its step
    micro_batch_size: int  # the micro-batch that fit (`micro_batch_size: auto` halves it on out-of-memory)
    accumulation_steps: int  # 1 where a script zeroed its gradients between micro-batches
    effective_batch: int
    lr: float  # after the batch-size LR rule
    gradients_zeroed_between_micro_batches: bool  # a script's loop that undid accumulation
    # the optimizer and its schedule
    optimizer: str  # sgd | adamw | muon, or script
    optimizer_impl: str  # default | foreach | fused | for_loop, or not_applicable
    optimizer_class: str  # a script's own optimizer's class name
    momentum: float | str  # a range "0.85-0.95 (onecycle)" where the schedule drives it
    nesterov: bool
    muon_parameters: int  # parameters Muon updates (the rest: AdamW)
    schedule: str  # script where the script's own scheduler stepped
    warmup_fraction: float | str  # 0.0 for a warm-up shorter than one step; not_applicable under onecycle
    label_smoothing: float
    # the data
    data_loader: str  # device (resident tensors) | dataloader
    num_workers: int
    pin_memory: bool
    prefetch_factor: int
    persistent_workers: bool
    augment: str  # where augmentation ran: loader (its workers), device, or none
    # how the run went
    oom_in_evaluation: bool  # out of memory in evaluation, which the micro-batch does not change
    cooldown_failed: str  # a cooldown branch's error (autospeed.train.cooldown): the trial's own run went on
    knobs_read: list[str]  # the knobs a script read (autospeed.script)
    not_applied: dict[str, NotApplied]  # the knobs the recipe set that did not act as set (below)


# The knobs whose value may not act, each with the value that asks for nothing (None: every value asks for
# something). A knob at that value is never listed: `attention: auto` on an MLP asked for no backend.
CHECKED_KNOBS = {"optimizer": None, "momentum": None, "precision": None, "compile": "none", "attention": "auto",
                 "channels_last": False, "activation_checkpointing": False, "cudnn_benchmark": False,
                 "data_loader": "device", "num_workers": 0, "pin_memory": False, "prefetch_factor": 2,
                 "persistent_workers": False, "warmup_fraction": 0.0, "label_smoothing": 0.0}


def not_applied(recipe, applied: Applied) -> dict[str, NotApplied]:
    """Each knob the recipe set that did not act as set: {knob: {"asked": its value, "ran": what acted}}
    ("ran" may be a reason above). `applied` holds what acted (recorded as the run was set up)."""
    out: dict[str, NotApplied] = {}
    for knob, asks_nothing in CHECKED_KNOBS.items():
        asked = getattr(recipe, knob)
        ran = applied.get(knob, asked)  # a run that failed before setting a knob up recorded nothing of it
        if ran != asked and (asks_nothing is None or asked != asks_nothing):
            out[knob] = {"asked": asked, "ran": ran}
    return out
