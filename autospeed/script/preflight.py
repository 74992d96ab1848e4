"""Before a search of a user's script spends its budget: the script starts, reads every searched knob, and says
what it runs with on its own.

The script runs once, with the space file's layers (its workload, target, budget and fixed knobs) over the
script's own `autospeed.init(defaults=...)`, to the end of its first optimizer step
(autospeed.script.channel PREFLIGHT, LAYERS); its context says which knobs it read by then and which
defaults it gave. Those defaults become the base of the baseline and of every trial (SearchSpec.script_defaults):
the space file names only what it changes, and the baseline is the script as its author runs it. A script that
fails before that step (a missing import, arguments it rejects) and a searched knob it never reads (it built its
own optimizer, say, so `optimizer_impl` would measure nothing) each stop the search with one line: the file, the
key, the fix (exit 2)."""

from __future__ import annotations

import os
import sys

from autospeed.errors import UserError
from autospeed.script.channel import WORKDIR
from autospeed.script.knob_view import HELPER_OF
from autospeed.script.runner import preflight_knobs


def check_script_reads(spec, space_path: str, console=sys.stdout):
    """The spec with the script's own defaults as its base and this folder as the script's working directory;
    raises UserError where the script cannot be searched as the file asks."""
    from autospeed.space import _check_layers

    script = spec.workload_options["script"]
    spec = spec.model_copy(update={"script_workdir": spec.script_workdir or os.environ.get(WORKDIR) or os.getcwd()})
    layers = {**spec.base(), **spec.fixed}
    print(f"preflight: running {script} to its first optimizer step", file=console, flush=True)
    run = preflight_knobs(spec.recipe_for({}), layers)
    knobs, defaults, result = run.knobs_read, run.defaults, run.result
    if knobs is None:
        raise failed_before_first_step(f"{space_path}: workload_options.script", spec.workload_options, result)
    for key in spec.space:
        knob = key.split(".")[0]
        if knob not in knobs:
            helper = HELPER_OF.get(knob, f"ctx.config.{knob}")
            raise UserError(f"{space_path}: key 'space.{key}': {script} never reads {knob} (by its first optimizer "
                            f"step), so searching it would measure nothing; read it through {helper}, or drop it "
                            f"from the space")
    spec = spec.model_copy(update={"script_defaults": defaults})
    _check_layers(spec, space_path)  # the file's layers over the script's defaults: still valid recipes
    own = ", ".join(f"{k}={v}" for k, v in defaults.items() if k not in ("target", "target_accuracy"))
    print(f"preflight: the baseline and every trial start from the script's own defaults ({own})",
          file=console, flush=True)
    if run.reseeded is not None:
        print(reseed_warning(script, run.reseeded), file=console, flush=True)
    return spec


def failed_before_first_step(where: str, options: dict, result) -> UserError:
    """The one line for a script whose preflight ended before its first optimizer step: why, and how to see it."""
    script = options["script"]
    command = " ".join(["python", script, *options.get("args", [])])
    why = result.error or result.status.value
    return UserError(f"{where}: {script} failed before its first optimizer step ({why}); run it alone to see why: "
                     f"{command}")


def reseed_warning(script: str, seed: int) -> str:
    """One line for a script that seeds torch itself after autospeed.init: the fix."""
    return (f"preflight: warning: {script} seeds torch itself after autospeed.init (torch.manual_seed({seed})), so "
            f"the confirmation's new seeds never reach it and its repeats differ by timing noise alone; give the "
            f"seed as a default (autospeed.init(defaults=dict(seed={seed}, ...))) and drop your own "
            f"torch.manual_seed, or seed with torch.manual_seed(ctx.config.seed)")


def under_script_defaults(recipe, config: str, console=sys.stdout):
    """A hand-written recipe for a script (`autospeed train --script train.py --config mine.yaml`, not an export):
    the keys its file gives over the script's own `autospeed.init(defaults=...)`, learnt from a preflight run to
    the first optimizer step, as a search makes its baseline. Without it every key the file leaves out would be
    autospeed's generic default (batch 128, lr 0.05, 10 epochs) instead of the script as its author runs it. An
    export names every key (its `script_own` say which are the script's), so it trains as written."""
    from autospeed.script.context import script_recipe

    given = recipe.model_dump(mode="json", include=recipe.model_fields_set)
    script = recipe.workload_options["script"]
    run = preflight_knobs(recipe, given)
    if run.knobs_read is None:
        raise failed_before_first_step(config, recipe.workload_options, run.result)
    if not run.defaults:
        return recipe
    own = ", ".join(f"{k}={v}" for k, v in run.defaults.items() if k not in given and k not in ("target",
                                                                                             "target_accuracy"))
    named = ", ".join(sorted(k for k in given if k not in ("workload", "workload_options")))
    print(f"preflight: {config} gives {named or 'nothing but the script'}; the rest is {script}'s own ({own})",
          file=console, flush=True)
    return script_recipe(run.defaults, given, f"{config} over {script}'s autospeed.init(defaults=...)")
