"""`workload: script`: a user's own training script as the workload (docs/design.md "User scripts").

Its `workload_options`: `script` (the path of the Python file), `args` (its command-line arguments),
`timeout_grace_seconds` (how long past its budget a silent script may run before it is killed; default 60)
and `after_result_seconds` (how long a script that has sent its result may go on with its after-work, a final
test pass or a checkpoint save, before it is ended; its result is kept either way; default 600).
`autospeed search --script train.py -- ARGS` writes the first two. Standard library only.
"""

from __future__ import annotations

import os
from typing import Any

from autospeed.errors import UserError

SCRIPT = "script"
DEFAULT_GRACE_SECONDS = 60.0
DEFAULT_AFTER_RESULT_SECONDS = 600.0
_KEYS = ("script", "args", "timeout_grace_seconds", "after_result_seconds")


def is_script(workload: str) -> bool:
    return workload == SCRIPT


def script_options(script: str, args: list[str]) -> dict[str, Any]:
    """The workload_options of `--script SCRIPT -- ARGS`: the script's absolute path (trials run elsewhere)."""
    return {"script": os.path.abspath(script), "args": list(args)}


def check_script_options(options: dict[str, Any], source: str = "workload_options") -> None:
    """One clear line for a missing script, unknown keys or arguments that are not a list of strings. `source`:
    where the options came from ("FILE: workload_options", or "--script" for the command line)."""
    if source.startswith("--"):  # the command line: name its flags
        where = {"script": "--script", "args": "the arguments after --"}
    else:
        where = {}
    for key in options:
        if key not in _KEYS:
            raise UserError(f"{source}.{key}: unknown option for workload 'script'; allowed: {', '.join(_KEYS)}")
    script = options.get("script")
    if not isinstance(script, str) or not script:
        raise UserError(f"{where.get('script', source + '.script')}: workload 'script' needs the path of the "
                        f"training script; pass --script train.py (or set workload_options.script)")
    if not os.path.isfile(script):
        raise UserError(f"{where.get('script', source + '.script')}: no such file: {script}; give the path of "
                        f"your training script")
    args = options.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise UserError(f"{where.get('args', source + '.args')}: must be a list of strings (the script's "
                        f"command line), got {args!r}")
    for key, default, meaning in (
            ("timeout_grace_seconds", DEFAULT_GRACE_SECONDS, "seconds past the budget a silent script may run "
                                                             "before it is killed"),
            ("after_result_seconds", DEFAULT_AFTER_RESULT_SECONDS, "seconds a script may go on after its result")):
        value = options.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise UserError(f"{source}.{key}: must be a number > 0 ({meaning}), got {value!r}")
