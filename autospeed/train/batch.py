"""The effective batch: the micro-batches it is trained in and the learning rate it trains with.

docs/design.md "Recipe: the knobs", rows micro_batch_size and lr_scaling. The effective batch is
`batch_size x accumulation_steps` samples per optimizer step, whatever the micro-batch:
`micro_batch_size` splits each `batch_size` into smaller forward/backward passes and
accumulates their gradients (the mean over micro-batches, so the update is the same for
models without batch-dependent layers such as batch norm). `lr_scaling` makes `lr` the
peak LR at `reference_batch` examples and scales it to the effective batch.

The trainer trains `as_trained(recipe, micro)`: the same recipe with batch_size = the
micro-batch, accumulation_steps raised to keep the effective batch, and lr scaled, so the
data path and the loop need to know nothing of either knob. Standard library only.
"""

from __future__ import annotations

import math

from autospeed.train.applied import Applied

AUTO = "auto"


def effective_batch(recipe) -> int:
    """Samples per optimizer step, over all data-parallel workers."""
    return recipe.workers * recipe.batch_size * recipe.accumulation_steps


def micro_batch_sizes(recipe) -> list[int]:
    """The micro-batch sizes the trainer tries, in order, until one fits in memory.

    No micro_batch_size: batch_size only (out of memory ends the run `oom`, as ever).
    An int m: m (batch_size itself when m >= batch_size: nothing to split).
    `auto`: batch_size, then halved while it stays a whole number (Composer's auto micro-batching).
    """
    setting = recipe.micro_batch_size
    if setting is None:
        return [recipe.batch_size]
    if setting != AUTO:
        return [min(setting, recipe.batch_size)]
    sizes = [recipe.batch_size]
    while sizes[-1] % 2 == 0:
        sizes.append(sizes[-1] // 2)
    return sizes


def lr_factor(recipe) -> float:
    """f(effective batch / reference_batch): 1 (none), the ratio (linear) or its square root (sqrt)."""
    rule = recipe.lr_scaling.rule
    if rule == "none":
        return 1.0
    ratio = effective_batch(recipe) / recipe.lr_scaling.reference_batch
    return ratio if rule == "linear" else math.sqrt(ratio)


def as_trained(recipe, micro_batch_size: int):
    """The recipe the training loop runs: batch_size = the micro-batch, accumulation_steps such that
    the effective batch is unchanged, lr = the scaled peak LR; both knobs resolved (none left to apply)."""
    if recipe.batch_size % micro_batch_size:
        raise ValueError(f"micro-batch {micro_batch_size} does not divide batch_size {recipe.batch_size}")
    split = recipe.batch_size // micro_batch_size
    return recipe.model_copy(update={
        "batch_size": micro_batch_size, "accumulation_steps": recipe.accumulation_steps * split,
        "lr": recipe.lr * lr_factor(recipe), "micro_batch_size": None,
        "lr_scaling": recipe.lr_scaling.model_copy(update={"rule": "none"}),
    })


def pin_micro_batch(recipe, applied: Applied):
    """The recipe with `micro_batch_size: auto` replaced by the micro-batch that fit (`applied`), so a
    recipe exported from the run trains it without searching again; other recipes unchanged."""
    if recipe.micro_batch_size != AUTO or "micro_batch_size" not in applied:
        return recipe
    return recipe.model_copy(update={"micro_batch_size": applied["micro_batch_size"]})
