"""The knobs as a user's script sees them: `ctx.config`, a read-only view of the run's recipe that notes every
knob read through it (the helpers read through it too), and which helper reads each knob, for the line that
stops a search whose script never reads a searched one (autospeed.script.preflight)."""

from __future__ import annotations

from typing import Any

from autospeed.recipe import KNOB_FIELDS, Recipe

# The helper that reads each knob (for the line that names what to call); others are read through ctx.config.
HELPER_OF = {
    **dict.fromkeys(("batch_size", "micro_batch_size", "num_workers", "pin_memory", "prefetch_factor",
                     "persistent_workers"), "ctx.dataloader()"),
    **dict.fromkeys(("precision", "attention"), "ctx.autocast()"),
    **dict.fromkeys(("compile", "channels_last", "activation_checkpointing"), "ctx.prepare_model()"),
    **dict.fromkeys(("optimizer_impl", "optimizer"), "ctx.optimizer() or ctx.optimizers()"),
    **dict.fromkeys(("momentum", "weight_decay"), "ctx.optimizers()"),
    **dict.fromkeys(("lr", "lr_scaling"), "ctx.lr()"),
    "schedule": "ctx.scheduler() or ctx.lr_at()",
    **dict.fromkeys(("warmup_fraction", "decay_fraction"), "ctx.scheduler()"),
    **dict.fromkeys(("accumulation_steps", "epochs"), "ctx.steps()"),
    "max_steps": "ctx.config.max_steps (your own max_iters)",
    **dict.fromkeys(("eval_every_epochs", "eval_every_steps"), "ctx.should_eval()"),
}



class KnobView:
    """A read-only view of the recipe that notes every knob read through it."""

    def __init__(self, recipe: Recipe, read: set[str]):
        object.__setattr__(self, "_recipe", recipe)
        object.__setattr__(self, "_read", read)

    def __getattr__(self, name: str) -> Any:
        if name in KNOB_FIELDS:
            self._read.add(name)
        return getattr(self._recipe, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ctx.config is read-only: the recipe is the search's; change your own variables")

    def __repr__(self) -> str:
        return f"config({self._recipe.model_dump(exclude_none=True, exclude={'measured'})})"
