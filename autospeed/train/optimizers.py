"""The recipe's optimizer and LR schedule, built from torch's own. torch only.

`optimizer: muon` is torch.optim.Muon on the 2-D hidden weights (every nn.Linear weight
except the output head: the last nn.Linear, and any weight an nn.Embedding shares) and
AdamW on the rest (embeddings, head, norms, biases, convolutions), as Muon's authors use
it. Muon runs with `adjust_lr_fn="match_rms_adamw"`, which scales its update to AdamW's
RMS, so one `lr` serves both parts (and the LR schedule steps both).

`optimizer_impl` picks torch's implementation: `default` (torch decides), `foreach` or
`fused`; it applies to SGD, AdamW and Muon's AdamW part (Muon itself has one). torch never
falls back silently from an explicit `foreach` or `fused`: it runs it or raises.

Each records in `applied` what really acted (docs/design.md "Honest figures"): a model with no 2-D
hidden weight (a CNN whose only nn.Linear is its head) trains with AdamW alone, recorded as
`optimizer: adamw`; `onecycle` cycles the momentum (SGD momentum, AdamW beta1, Muon momentum)
between its own bounds, recorded as `momentum: "0.85-0.95 (onecycle)"`, and has its own warm-up
(`warmup_fraction: not_applicable`); a warm-up shorter than one step is `warmup_fraction: 0.0`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from autospeed.train.applied import NOT_APPLICABLE, Applied


def muon_split(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(2-D hidden weights for Muon, every other parameter for AdamW); tied parameters once."""
    embedded = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    head = linears[-1] if linears else None
    hidden = [m.weight for m in linears if m is not head and id(m.weight) not in embedded]
    hidden_ids = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if id(p) not in hidden_ids]
    return hidden, rest


def _impl(recipe) -> dict[str, Any]:
    return {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[recipe.optimizer_impl]


def build_optimizers(recipe, model: nn.Module, applied: Applied) -> list[torch.optim.Optimizer]:
    """The recipe's optimizer(s): one, or two for Muon (Muon + AdamW). Records what took effect in `applied`."""
    impl = _impl(recipe)
    applied["optimizer"] = recipe.optimizer
    applied["optimizer_impl"] = recipe.optimizer_impl
    applied["momentum"] = recipe.momentum  # build_schedule overwrites it where the schedule drives the momentum
    if recipe.optimizer == "sgd":
        applied["nesterov"] = recipe.momentum > 0
        return [torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                                nesterov=recipe.momentum > 0, weight_decay=recipe.weight_decay, **impl)]
    adamw = dict(lr=recipe.lr, betas=(recipe.momentum, 0.999), weight_decay=recipe.weight_decay, **impl)
    if recipe.optimizer == "adamw":
        return [torch.optim.AdamW(model.parameters(), **adamw)]
    if not hasattr(torch.optim, "Muon"):
        raise RuntimeError(f"optimizer: muon needs torch >= 2.9 (torch.optim.Muon); this is torch "
                           f"{torch.__version__}: upgrade torch or use adamw")
    hidden, rest = muon_split(model)
    applied["muon_parameters"] = sum(p.numel() for p in hidden)
    if not hidden:  # nothing for Muon: this is AdamW on every parameter, and says so
        applied["optimizer"] = "adamw"
        return [torch.optim.AdamW(rest, **adamw)]
    optimizers = [torch.optim.Muon(hidden, lr=recipe.lr, weight_decay=recipe.weight_decay,
                                   momentum=recipe.momentum, adjust_lr_fn="match_rms_adamw")]
    if rest:
        optimizers.append(torch.optim.AdamW(rest, **adamw))
    return optimizers


def build_schedule(recipe, optimizer: torch.optim.Optimizer, total_steps: int,
                   applied: Applied | None = None):
    """torch's own schedulers, stepped once per optimizer step over `total_steps`; records in `applied`
    the warm-up that acts and, under onecycle, the momentum it cycles."""
    applied = {} if applied is None else applied
    sched = torch.optim.lr_scheduler
    if recipe.schedule == "onecycle":
        # OneCycleLR cycles the momentum (cycle_momentum=True), overriding the recipe's, and warms up itself
        schedule = sched.OneCycleLR(optimizer, max_lr=recipe.lr, total_steps=max(total_steps, 2))
        group = optimizer.param_groups[0]
        applied["momentum"] = f"{group['base_momentum']:g}-{group['max_momentum']:g} (onecycle)"
        applied["warmup_fraction"] = NOT_APPLICABLE
        return schedule
    warmup = int(recipe.warmup_fraction * total_steps)
    applied["warmup_fraction"] = recipe.warmup_fraction if warmup > 0 else 0.0
    rest = max(total_steps - warmup, 1)
    if recipe.schedule == "wsd":
        return _warmup_stable_decay(optimizer, warmup, rest, total_steps - decay_start_step(recipe, total_steps))
    main = {
        "constant": lambda: sched.ConstantLR(optimizer, factor=1.0, total_iters=0),
        "cosine": lambda: sched.CosineAnnealingLR(optimizer, T_max=rest),
        "linear": lambda: sched.LinearLR(optimizer, start_factor=1.0, end_factor=0.0, total_iters=rest),
    }[recipe.schedule]()
    if warmup == 0:
        return main
    ramp = sched.LinearLR(optimizer, start_factor=1.0 / warmup, end_factor=1.0, total_iters=warmup)
    return sched.SequentialLR(optimizer, [ramp, main], milestones=[warmup])


def decay_start_step(recipe, total_steps: int) -> int:
    """The optimizer step where the recipe's LR starts its last fall: wsd's decay (its last decay_fraction of the
    steps, at least one, after the warm-up); the run's end for constant; 0 where it falls over the whole run."""
    if recipe.schedule == "constant":
        return total_steps
    if recipe.schedule != "wsd":
        return 0
    rest = max(total_steps - int(recipe.warmup_fraction * total_steps), 1)
    return total_steps - min(max(1, round(recipe.decay_fraction * total_steps)), rest)


def _warmup_stable_decay(optimizer, warmup: int, rest: int, decay: int):
    """Warm-up over `warmup` steps, the peak LR, then linear decay to 0 over the last `decay` of all steps
    (torch's LinearLR and ConstantLR in a SequentialLR)."""
    sched = torch.optim.lr_scheduler
    decay = min(decay, rest)
    stable = rest - decay
    parts, milestones = [], []
    if warmup:
        parts.append(sched.LinearLR(optimizer, start_factor=1.0 / warmup, end_factor=1.0, total_iters=warmup))
        milestones.append(warmup)
    if stable:
        parts.append(sched.ConstantLR(optimizer, factor=1.0, total_iters=0))
        milestones.append(warmup + stable)
    parts.append(sched.LinearLR(optimizer, start_factor=1.0, end_factor=0.0, total_iters=decay))
    return parts[0] if len(parts) == 1 else sched.SequentialLR(optimizer, parts, milestones=milestones)
