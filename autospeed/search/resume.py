"""What `--resume` reads back before a search goes on: the stored state of the latest search of the name, checked
against the space file as given now (docs/design.md "Crash anywhere, lose nothing")."""

from __future__ import annotations

import json
import sys
from typing import Any

from autospeed.errors import UserError
from autospeed.search.storage import latest_search_dir, search_root
from autospeed.space import SearchSpec


def resume_state(spec: SearchSpec, storage_path: str | None, trials: int | None, space_path: str,
                  console=sys.stdout) -> dict[str, Any] | None:
    """The state of the latest search of this name to resume; None (a new search, said in one line) where there
    is none, as Optuna's load_if_exists does: a preemption wrapper can always pass --resume."""
    folder = latest_search_dir(storage_path, spec.name)
    if folder is None:
        print(f"--resume: no earlier search named '{spec.name}' under {search_root(storage_path, spec.name)}: "
              f"starting it", file=console, flush=True)
        return None
    state = folder.read_state()
    # re-validated, the stored spec gains the defaults of keys added since it was written (probe, ...)
    stored = SearchSpec.model_validate(state["spec"]).model_dump(mode="json")
    # how long to wait for a tracking store is the session's, not the search's: it may change on resume
    # a script's defaults and folder are not the file's: the preflight reads them again (same_script checks them)
    changed = [k for k in _changed_keys(stored, spec.model_dump(mode="json"))
               if not k.startswith(("tracking.", "script_defaults", "script_workdir"))]
    if changed:
        raise UserError(f"{space_path}: changed since the search started ({', '.join(changed)}); "
                        f"restore those keys to resume, or start a new search without --resume")
    if trials is not None and trials < state["trials"]:
        raise UserError(f"--trials: the search '{spec.name}' has {state['trials']} trials; --resume continues or "
                        f"extends it (--trials above {state['trials']}), never shrinks it; drop --trials, or start "
                        f"a new search without --resume")
    if trials is not None and trials > state["trials"]:
        state = {**state, "trials": trials, "extended_from": state["trials"]}
    return state


def same_script(spec: SearchSpec, state: dict[str, Any], space_path: str) -> SearchSpec:
    """A resumed script search: the script's defaults as its trials so far had them (else they would measure
    another baseline), and its runs in the folder they ran in."""
    stored = state["spec"].get("script_defaults") or {}
    if stored and json.dumps(stored, sort_keys=True) != json.dumps(spec.script_defaults, sort_keys=True):
        changed = sorted(k for k in {*stored, *spec.script_defaults} if stored.get(k) != spec.script_defaults.get(k))
        raise UserError(f"{space_path}: workload_options.script: its autospeed.init(defaults=...) changed since the "
                        f"search started ({', '.join(changed)}); restore them to resume, or start a new search "
                        f"without --resume")
    return spec.model_copy(update={"script_workdir": state["spec"].get("script_workdir") or spec.script_workdir})


def _changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _changed_keys(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}")
    return out
