"""The line protocol between a user's script (autospeed.script.context) and the process that runs it
(autospeed.script.runner). Standard library only.

The runner starts the script with these environment variables; a script started without them runs on
its own defaults (no autospeed around it).
  * RECIPE: the trial's recipe (JSON), and MICRO_BATCH: the micro-batch this attempt trains in;
  * REPORT_FD / REPLY_FD: the script writes one JSON object per line to the first and, after a message
    that asks for one, reads one reply line from the second;
  * CLOCK_OFFSET: train-clock seconds earlier attempts of the run spent (out of memory, `auto` micro-batch);
  * PREFLIGHT: set for the search's preflight run, which ends after the first optimizer step;
  * MEASURE: a probe's or a maths-neutrality check's run (JSON: `marks`, the optimizer steps at which the clock
    is sent as an `eval` event with no metrics, and `loss`, whether it carries the mean train loss since the
    previous mark); the run ends at the last mark (autospeed.script.measure);
  * LAYERS: the preflight's recipe keys (JSON) that go over the script's own `defaults` (its RECIPE is the
    same without them): the search learns the defaults from the reply to `preflight`;
  * WORKDIR: the folder the search was started from, where a Ray trial starts the script (Ray moves the
    trial's own process into its trial folder);
  * WALL_BEFORE_SECONDS / WALL_ORIGIN: where the run's wall to target counts from (the runner's origin).

Messages from the script (`kind`):
  * `started`: its context is up (the script's imports are done); no reply.
  * `eval`: one evaluation (autospeed.train.result.EvalEvent's fields); reply {"stop": bool}.
  * `preflight`: the knobs the script read up to its first optimizer step, and the `defaults` it gave
    autospeed.init (with its own ways: schedule and optimizer `script` unless given); reply {"stop": true}.
  * `result`: the run's result (TrainResult's fields), sent once, when the run ends; no reply.
End of file on the reply pipe means stop: the runner is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

RECIPE = "AUTOSPEED_RECIPE"
MICRO_BATCH = "AUTOSPEED_MICRO_BATCH"
REPORT_FD = "AUTOSPEED_REPORT_FD"
REPLY_FD = "AUTOSPEED_REPLY_FD"
CLOCK_OFFSET = "AUTOSPEED_CLOCK_OFFSET"
PREFLIGHT = "AUTOSPEED_PREFLIGHT"
MEASURE = "AUTOSPEED_MEASURE"
LAYERS = "AUTOSPEED_RECIPE_LAYERS"
WORKDIR = "AUTOSPEED_WORKDIR"
# seconds from the runner's wall-clock origin (autospeed train's process start, or train() entry in a trial) to
# the script's launch, and that origin's name: the script's wall to target counts from there
WALL_BEFORE = "AUTOSPEED_WALL_BEFORE_SECONDS"
WALL_ORIGIN = "AUTOSPEED_WALL_ORIGIN"
ENV_KEYS = (RECIPE, MICRO_BATCH, REPORT_FD, REPLY_FD, CLOCK_OFFSET, PREFLIGHT, MEASURE, LAYERS, WALL_BEFORE,
            WALL_ORIGIN)


class ScriptSide:
    """The script's end: send a message, read a reply. Only rank 0 of a data-parallel run has one."""

    def __init__(self, report_fd: int, reply_fd: int):
        self.out = os.fdopen(report_fd, "w", buffering=1)
        self.replies = os.fdopen(reply_fd, "r")

    @classmethod
    def from_env(cls) -> "ScriptSide | None":
        if REPORT_FD not in os.environ:
            return None
        return cls(int(os.environ[REPORT_FD]), int(os.environ[REPLY_FD]))

    def send(self, kind: str, **fields: Any) -> None:
        with contextlib.suppress(OSError):  # the runner is gone (a broken pipe): nothing to tell
            self.out.write(json.dumps({"kind": kind, **fields}, default=str) + "\n")
            self.out.flush()

    def ask(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Send and wait for the reply; {"stop": True} when the runner is gone."""
        self.send(kind, **fields)
        try:
            line = self.replies.readline()
        except OSError:
            line = ""
        return json.loads(line) if line.strip() else {"stop": True}
