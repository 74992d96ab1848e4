"""Run a user's training script as one training run: `train_script(recipe)` is `train(recipe)` for
`workload: script` (docs/design.md "User scripts").

The script runs in processes of its own (`python SCRIPT ARGS`, one per data-parallel worker, started
torchrun-style with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT); its knob context
(autospeed.script.context) reads the recipe from the environment and sends each evaluation here
(autospeed.script.channel). Each one goes to `on_eval`, whose answer (stop or go on) goes back, exactly
as the built-in trainer calls it; the run's result comes back at its end. So a trial, a confirmation
run and `autospeed train --script` treat a script like a built-in workload.

* A script that crashes is `failed` (`oom` for out of memory) with the tail of its stderr.
* One that sends nothing for its budget plus `timeout_grace_seconds` (workload_options, default 60 s) is
  killed as hung: `failed`, the error says so, and the evaluations it reported stay on the result.
* One that sent its result and goes on (a final test pass, a checkpoint save) is given
  `after_result_seconds` (default 600 s) to exit, said in a line; past it, it is ended and its result kept.
* `micro_batch_size: auto`: an out-of-memory in a training step starts the script again with half the
  micro-batch, its train-clock time charged to the run, as the built-in trainer does.
* The script's processes die with this one (Linux PR_SET_PDEATHSIG, set by the context), so a trial ASHA
  stops or a killed search leaves none behind.
Standard library, plus the trainer's result types.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from autospeed.outcome import Status, objective
from autospeed.script import channel
from autospeed.script.options import DEFAULT_AFTER_RESULT_SECONDS, DEFAULT_GRACE_SECONDS
from autospeed.train.batch import micro_batch_sizes
from autospeed.train.result import EvalEvent, TrainResult, wall_clock_origin

# after-work shorter than this (or half of after_result_seconds) passes without a word: a test pass, a save
AFTER_WORK_QUIET_SECONDS = 10.0
TAIL_LINES = 40  # stderr lines kept for a failed run's MLflow run
_EOF = object()


def train_script(recipe, on_eval: Callable[[EvalEvent], bool | None] | None = None, num_threads: int | None = None,
                 preflight: bool = False, measure: dict[str, Any] | None = None) -> TrainResult:
    """Train `recipe` (workload: script) by running its script; never raises for a run that goes wrong. `measure`:
    a probe's or a loss trace's marks (autospeed.script.measure), each an event to `on_eval`."""
    offset = 0.0
    # the wall clock's origin is this process's (autospeed train's start, or this call in a trial): the script's
    # start-up is inside its wall to target, as the CLI's own start-up is
    before_entry_seconds, origin = wall_clock_origin()
    entry = time.perf_counter()
    for micro in micro_batch_sizes(recipe):
        wall = (before_entry_seconds + time.perf_counter() - entry, origin)
        result = ScriptRun(recipe, micro, offset, num_threads, preflight, wall, measure=measure).run(on_eval)
        result.micro_batch_retry_seconds = offset
        result.wall_seconds = time.perf_counter() - entry  # this call's, as train()'s: the script's start-up inside
        oom_in_step = result.status == Status.OOM and not result.applied.get("oom_in_evaluation")
        if not oom_in_step:
            break
        offset = result.train_seconds
    return result


def preflight_knobs(recipe, layers: dict[str, Any] | None = None, num_threads: int | None = None
                    ) -> ScriptRun:
    """Run the script to its first optimizer step, with `layers` (the search's keys) over its own defaults: the
    run's `knobs_read` by then (None: it never got there, its `result` says why), the `defaults` it gave
    autospeed.init, and `reseeded`, the seed it gave torch itself after init (None: it did not)."""
    run = ScriptRun(recipe, micro_batch_sizes(recipe)[0], 0.0, num_threads, preflight=True, layers=layers)
    run.result = run.run(None)
    return run


class ScriptRun:
    """One attempt: the script's processes, the relay of their reports, and the result."""

    def __init__(self, recipe, micro: int, clock_offset: float, num_threads: int | None, preflight: bool,
                 wall: tuple[float, str] | None = None, layers: dict[str, Any] | None = None,
                 measure: dict[str, Any] | None = None):
        self.recipe, self.micro, self.offset = recipe, micro, clock_offset
        self.layers, self.measure = layers, measure
        self.defaults: dict[str, Any] = {}  # what the script gave autospeed.init (its preflight says)
        self.reseeded: int | None = None  # the seed it gave torch after autospeed.init (its preflight says)
        self.result: TrainResult | None = None
        self.threads, self.preflight = num_threads, preflight
        options = recipe.workload_options
        self.cmd = [sys.executable, options["script"], *options.get("args", [])]
        self.grace = float(options.get("timeout_grace_seconds", DEFAULT_GRACE_SECONDS))
        self.after_result = float(options.get("after_result_seconds", DEFAULT_AFTER_RESULT_SECONDS))
        self.ended_after_result: str | None = None  # why a script that had sent its result was ended
        self.evaluations: list[EvalEvent] = []  # every evaluation it reported (a failed run keeps them)
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.knobs_read: list[str] | None = None
        self.last_event: EvalEvent | None = None
        self.killed_why: str | None = None
        self.wall = wall  # (seconds from the wall clock's origin to this launch, the origin's name)
        self.tail_readers: list[threading.Thread] = []

    def _env(self, rank: int, port: int | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in channel.ENV_KEYS}  # never an outer run's
        env.update({channel.RECIPE: self.recipe.model_dump_json(), channel.MICRO_BATCH: str(self.micro),
                    channel.CLOCK_OFFSET: repr(self.offset), "AUTOSPEED_PARENT_PID": str(os.getpid()),
                    "PYTHONUNBUFFERED": "1"})
        if self.preflight:
            env[channel.PREFLIGHT] = "1"
        if self.layers is not None:
            env[channel.LAYERS] = json.dumps(self.layers)
        if self.measure is not None:
            env[channel.MEASURE] = json.dumps(self.measure)
        if self.wall is not None:
            env[channel.WALL_BEFORE], env[channel.WALL_ORIGIN] = repr(self.wall[0]), self.wall[1]
        if self.threads:
            env["AUTOSPEED_THREADS"] = env["OMP_NUM_THREADS"] = str(self.threads)
        if port is not None:  # what torchrun gives each of its processes on one node (its elastic agent's aside)
            n = str(self.recipe.workers)
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank), ROLE_NAME="default",
                       WORLD_SIZE=n, LOCAL_WORLD_SIZE=n, GROUP_WORLD_SIZE="1", ROLE_WORLD_SIZE=n,
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        return env

    def _start(self) -> tuple[list[subprocess.Popen], int, int]:
        report_r, report_w = os.pipe()
        reply_r, reply_w = os.pipe()
        port = _free_port() if self.recipe.workers > 1 else None
        procs = []
        for rank in range(self.recipe.workers):
            env = self._env(rank, port)
            fds: tuple[int, ...] = ()
            if rank == 0:
                env[channel.REPORT_FD], env[channel.REPLY_FD] = str(report_w), str(reply_r)
                fds = (report_w, reply_r)
            # a session of its own: the whole group (DataLoader workers too) is killed on the way out. The script's
            # own prints go to stderr with its stderr: stdout is autospeed's (`autospeed train --json` prints the
            # result object there, and nothing else)
            # in the folder the search or `autospeed train` started from, whichever process runs it (a Ray trial's
            # own is its trial folder): a script's relative paths mean what they mean when it runs alone
            procs.append(subprocess.Popen(self.cmd, env=env, pass_fds=fds, stdout=_stderr_fd(), stderr=subprocess.PIPE,
                                          start_new_session=True, cwd=os.environ.get(channel.WORKDIR) or None))
            reader = threading.Thread(target=self._keep_tail, args=(procs[-1].stderr,), daemon=True)
            reader.start()
            self.tail_readers.append(reader)
        os.close(report_w)
        os.close(reply_r)
        return procs, report_r, reply_w

    def _keep_tail(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            self.tail.append(line.rstrip("\n"))
            sys.stderr.write(line)  # the script's own output stays visible (the trial's log, the terminal)

    def run(self, on_eval) -> TrainResult:
        start = time.monotonic()
        try:
            procs, report_r, reply_w = self._start()
        except OSError as e:
            return self._failed(f"could not start {self.cmd[1]}: {e}", time.monotonic() - start)
        messages: queue.Queue = queue.Queue()
        threading.Thread(target=_read_lines, args=(report_r, messages), daemon=True).start()
        replies = os.fdopen(reply_w, "w", buffering=1)
        result: dict[str, Any] | None = None
        silent_limit = self.recipe.max_train_seconds + self.grace
        last_heard, ended_at, result_at = time.monotonic(), None, None
        try:
            while True:
                try:
                    msg = messages.get(timeout=0.2)
                except queue.Empty:
                    now = time.monotonic()
                    if procs[0].poll() is not None and ended_at is None:
                        ended_at = now  # rank 0 has exited: read what it sent, then stop listening
                    if ended_at is not None and (messages.empty() and now - ended_at > 1.0):
                        break
                    if result is None and now - last_heard > silent_limit:
                        self.killed_why = (f"killed: no report for {now - last_heard:.0f} s (budget "
                                           f"{self.recipe.max_train_seconds:g} s + timeout_grace_seconds "
                                           f"{self.grace:g} s); the script hung")
                        break
                    if (result_at is not None and procs[0].poll() is None
                            and now - result_at > min(AFTER_WORK_QUIET_SECONDS, self.after_result / 2)):
                        result_at = None  # said once, only for after-work that lasts: a short test pass is quiet
                        print(f"autospeed: the script sent its result and goes on (its after-work: a test pass, a "
                              f"checkpoint), still running {now - last_heard:.0f} s later; waiting up to "
                              f"{self.after_result:g} s in all for it to exit (workload_options.after_result_seconds)",
                              file=sys.stderr, flush=True)
                    if result is not None and now - last_heard > self.after_result:
                        # its measured result stands: only the after-work (a test pass, a checkpoint) is cut short
                        self.ended_after_result = (f"ended {self.after_result:g} s after its result, still running "
                                                   f"(workload_options.after_result_seconds); its result is kept")
                        break
                    continue
                if msg is _EOF:
                    break
                last_heard = time.monotonic()  # any message, `started` included: silence counts from here
                kind = msg.get("kind")
                if kind == "eval":
                    event = EvalEvent(**msg["event"])
                    self.last_event = event
                    self.evaluations.append(event)
                    stop = bool(on_eval(event)) if on_eval is not None else False
                    _reply(replies, {"stop": stop})
                elif kind == "preflight":
                    self.knobs_read = list(msg.get("knobs_read", []))
                    self.defaults = dict(msg.get("defaults") or {})
                    self.reseeded = msg.get("reseeded")
                    _reply(replies, {"stop": True})
                elif kind == "result":
                    result = msg["result"]
                    if not self.preflight:  # what follows is its after-work, on no clock: said if it lasts
                        result_at = time.monotonic()
            self._end(procs)
        finally:
            _kill(procs)
            replies.close()
        for reader in self.tail_readers:  # the last lines of a traceback, read to the end of the stream
            reader.join(timeout=5)
        return self._result(result, procs, time.monotonic() - start)

    def _end(self, procs: list[subprocess.Popen]) -> None:
        """Let every process exit on its own (within the grace period), then kill what is left."""
        deadline = time.monotonic() + (0 if self.killed_why or self.ended_after_result else self.grace)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):  # what is left is killed next (_kill)
                p.wait(timeout=max(0.0, deadline - time.monotonic()))

    def _result(self, sent: dict[str, Any] | None, procs, wall: float) -> TrainResult:
        codes = [p.poll() for p in procs]
        tail = "\n".join(self.tail)
        if sent is not None and self.killed_why is None:
            sent["status"] = Status(sent["status"])
            result = TrainResult(**sent)
            if self.knobs_read is None:
                self.knobs_read = result.applied.get("knobs_read")
            if result.status in (Status.FAILED, Status.OOM) or any(c not in (0, None) for c in codes):
                result.stderr_tail = tail
            if self.ended_after_result:
                print(f"autospeed: the script was {self.ended_after_result}", file=sys.stderr, flush=True)
            return result
        if self.killed_why is not None:
            return self._failed(self.killed_why, wall, tail)
        code = codes[0]
        why = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        last_line = next((ln for ln in reversed(self.tail) if ln.strip()), "")
        if self.preflight and code == 0 and self.knobs_read is not None:
            return self._failed("preflight ended after its first step", wall, "", Status.NOT_REACHED)
        oom = "OutOfMemoryError" in tail or "out of memory" in tail.lower()
        return self._failed(f"the script {why} without a result: {last_line}".rstrip(": "), wall, tail,
                            Status.OOM if oom else Status.FAILED)

    def _failed(self, error: str, wall: float, tail: str = "", status: Status = Status.FAILED) -> TrainResult:
        target = self.recipe.resolved_target
        e = self.last_event
        best = e.best_value if e else None
        train_seconds = e.train_seconds if e else self.offset
        return TrainResult(
            status=status, tta_seconds=None, target=target.model_dump(), best_value=best,
            best_metrics=dict(e.best_metrics) if e else {},
            objective=objective(status, None, best, target.value, self.recipe.max_train_seconds, target.mode),
            train_seconds=train_seconds, wall_seconds=wall, compile_seconds=e.compile_seconds if e else 0.0,
            first_step_seconds=0.0, peak_memory_mb=e.peak_memory_mb if e else None, samples_per_second=0.0,
            steps=e.step if e else 0, epochs_done=e.epoch if e else 0.0, evaluations=len(self.evaluations),
            history=[ev.flat() for ev in self.evaluations],  # what it measured before it failed
            applied={"micro_batch_size": self.micro, "knobs_read": self.knobs_read or []},
            environment={}, error=error, stderr_tail=tail or None)


def _read_lines(fd: int, out: queue.Queue) -> None:
    with os.fdopen(fd, "r") as stream:
        for line in stream:
            if line.strip():
                try:
                    out.put(json.loads(line))
                except json.JSONDecodeError:  # not ours: ignore
                    continue
    out.put(_EOF)


def _reply(stream, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the script is gone (a broken pipe): nothing to answer
        stream.write(json.dumps(message) + "\n")
        stream.flush()


def _kill(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
            p.wait()


def _stderr_fd() -> int:
    """This process's stderr as a file descriptor for a child's stdout (2 where sys.stderr has none: a test's
    capture)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):
        return 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
