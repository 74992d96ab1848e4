"""Before a search of a user's script spends its budget: the script starts, and reads every searched knob.

The script runs once, with the recipe of the search's first layers (the space file's fixed knobs), to
the end of its first optimizer step (autospeed.train.script_channel PREFLIGHT); its context says which knobs it
read by then. A script that fails before that step (a missing import, arguments it rejects) and a searched
knob it never reads (it built its own optimizer, say, so `optimizer_impl` would measure nothing) each stop
the search with one line: the file, the key, the fix (exit 2)."""

from __future__ import annotations

import sys

from autospeed.errors import UserError
from autospeed.script.knob_view import HELPER_OF
from autospeed.train.script_run import preflight_knobs


def check_script_reads(spec, space_path: str, console=sys.stdout) -> None:
    script = spec.workload_options["script"]
    recipe = spec.recipe_for({})
    print(f"preflight: running {script} to its first optimizer step", file=console, flush=True)
    knobs, result = preflight_knobs(recipe)
    if knobs is None:
        command = " ".join(["python", script, *spec.workload_options.get("args", [])])
        raise UserError(f"{space_path}: workload_options.script: {script} failed before its first optimizer step "
                        f"({result.error or result.status.value}); run it alone to see why: {command}")
    for key in spec.space:
        knob = key.split(".")[0]
        if knob not in knobs:
            helper = HELPER_OF.get(knob, f"ctx.config.{knob}")
            raise UserError(f"{space_path}: key 'space.{key}': {script} never reads {knob} (by its first optimizer "
                            f"step), so searching it would measure nothing; read it through {helper}, or drop it "
                            f"from the space")
