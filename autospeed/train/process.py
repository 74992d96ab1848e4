"""Training in a process of its own, away from the search's driver: where confirmation runs train.

The driver holds Ray's, MLflow's and Optuna's state: their threads, and a Python heap about twice a
bare trainer's, which every full garbage collection walks. A recipe that takes many small steps per
second trains measurably slower there: fast.yaml's baseline (batch 32) reached its target in 21.0 s
in the driver against 13.6 s as trial 0 of the same search (in a Ray worker), on the 2-core CPU
machine. So confirmation runs, like trials and like a production `autospeed train`, train in a
process that does nothing else:

* `in_fresh_process`: a new (spawned) process per run, as `autospeed train --config best.yaml` is
  (autospeed.run_recipe.train_in_fresh_process trains a recipe in one). Its cold start (on a GPU: CUDA
  context, cuDNN/cuBLAS handles, kernel loading, 1.0 s against 0.01 s warm on an H100,
  experiments/results/gpu/cold_start_gpu.md) is on the run's train clock, and its interpreter start, imports
  and data loading are in its `wall_to_target_seconds`, which counts from the process's start
  (autospeed.train.result). The process is not a daemon: its DataLoader may start
  worker processes, which a daemonic process may not (a multiprocessing.Pool worker failed every such run).
* Its compile from an empty inductor cache (`compile_cache="cold"`, confirmation's default: the space file's
  `confirm.compile_cache`): the process gets a new empty TORCHINDUCTOR_CACHE_DIR of its own (and TRITON_CACHE_DIR
  in it), removed after, so a compiled recipe pays the compile a production run pays on a new machine, not the
  near-free one of graphs an earlier run on this machine left in the shared folder (TTA 3.71 s warm against
  15.84 s on a new machine, experiments/results/cold_start_cache_cpu.md). `warm` keeps the inherited folder.

This module imports no Ray, MLflow or Optuna, and neither does the process.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import tempfile

COLD, WARM = "cold", "warm"  # the inductor cache a fresh process compiles from: empty and its own, or inherited


def _ignore_ctrl_c() -> None:
    """In the training process: Ctrl-C reaches the whole process group, but the driver decides what it
    means (it ends its runs as KILLED and then terminates this process), so no second traceback here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_and_send(send, fn, args, inductor_cache_dir: str | None = None) -> None:
    """The fresh process: run fn(*args), send its value (or the exception it raised) back, exit. With
    `inductor_cache_dir`, torch.compile caches there (and Triton under it), before anything compiles."""
    _ignore_ctrl_c()
    if inductor_cache_dir is not None:  # read by inductor at each use (cache_dir_utils), inherited by a script
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache_dir
        os.environ["TRITON_CACHE_DIR"] = os.path.join(inductor_cache_dir, "triton")
    # A spawned process makes "spawn" its own default start method, so a DataLoader here would spawn its
    # workers (a new interpreter importing torch, every epoch unless persistent) where `autospeed train` forks
    # them: on an H100 the winner's confirmation runs read a third of its trial's samples/s. Back to the
    # platform's default, as production has it.
    multiprocessing.set_start_method(None, force=True)
    try:
        answer = ("result", fn(*args))
    except BaseException as e:  # noqa: BLE001 - the driver re-raises it, as a direct call would have
        answer = ("error", e)
    try:
        send.send(answer)
    except Exception as e:  # noqa: BLE001 - an exception that does not pickle: its text
        send.send(("error", RuntimeError(f"{type(answer[1]).__name__}: {answer[1]} ({e})")))
    send.close()


def in_fresh_process(fn, *args, compile_cache: str = WARM, inductor_cache_dir: str | None = None):
    """fn(*args) in a new (spawned, not daemonic) process; its value, or the exception it raised. Leaving by an
    exception (Ctrl-C included) terminates the process, whatever it was doing; a process that dies without a
    result (killed, a crash in native code) raises RuntimeError. `compile_cache="cold"`: the process compiles
    from a new empty inductor cache folder of its own, removed when it ends; "warm": the inherited one, or
    `inductor_cache_dir`, the caller's folder, kept (what earlier runs compiled into it is found there)."""
    if compile_cache not in (COLD, WARM):
        raise ValueError(f"compile_cache must be {COLD!r} or {WARM!r}, not {compile_cache!r}")
    if compile_cache == WARM:
        return _in_fresh_process(fn, args, inductor_cache_dir)
    folder = tempfile.mkdtemp(prefix="autospeed-inductor-cold-")
    try:
        return _in_fresh_process(fn, args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _in_fresh_process(fn, args, inductor_cache_dir: str | None):
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    # not daemonic: a DataLoader's workers are its children
    process = context.Process(target=_run_and_send, args=(send, fn, args, inductor_cache_dir),
                              name="autospeed-train")
    process.start()
    send.close()  # only the child holds the sending end: its death ends recv() with EOFError
    try:
        try:
            kind, value = receive.recv()
        except EOFError:
            process.join()
            raise RuntimeError(f"the training process ended (exit code {process.exitcode}) without a result; "
                               f"see its output above") from None
        process.join()
    except BaseException:
        if process.is_alive():
            process.terminate()
            process.join()
        raise
    finally:
        receive.close()
    if kind == "error":
        raise value
    return value
