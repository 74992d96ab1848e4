"""A tiny user script for the own-script tests: a linear classifier on a few hundred generated samples,
written as a user would, with autospeed's context. Its command line sets what it does wrong or records:

  --observe FILE     append one JSON line per optimizer step with what the script saw inside its loop:
                     the autocast dtype in the forward, the compiled module and how many graphs torch.compile
                     captured in the process so far (torch._dynamo's counters), the optimizer's fused flag, the
                     micro-batches since the previous step, the micro-batch size, the process id
  --oom-above N      raise torch.OutOfMemoryError in a training forward of more than N samples
  --seconds-before-oom S  spend S seconds in that forward (on the train clock) before raising
  --crash-at-step N  raise RuntimeError("boom at step N") at that step
  --hang-at-step N   block forever at that step (a hang)
  --gate DIR         before each optimizer step, wait until DIR/go exists (the test decides when it trains);
                     the search's preflight run (AUTOSPEED_PREFLIGHT set) passes the gate
  --own-optimizer    build torch.optim.SGD itself, never calling ctx.optimizer (optimizer_impl unread)
  --eval-seconds S   spend S seconds in each evaluation, inside ctx.paused()
  --pid-file FILE    append this process's id (one line) as the script starts: an attempt that fails before
                     its first optimizer step (out of memory at once) leaves its pid too
  --after-work-pass  after its result, a final test pass (brief after-work), then exit
  --relative-file P  read P as the script starts, a path relative to its working directory (its data, its
                     configuration): a run started anywhere but the folder the search started from fails
  --own-step         step its optimizer itself (opt.step(), opt.zero_grad()), never calling ctx.step
  --own-seed N       after autospeed.init, seed torch and its loader's order itself with N, not from
                     ctx.config.seed: every run trains alike whatever the recipe's seed
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

TINY_SCRIPT = textwrap.dedent('''
    import argparse, json, os, sys, threading, time
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset
    import autospeed

    p = argparse.ArgumentParser()
    p.add_argument("--observe")
    p.add_argument("--oom-above", type=int)
    p.add_argument("--seconds-before-oom", type=float, default=0.0)
    p.add_argument("--crash-at-step", type=int)
    p.add_argument("--hang-at-step", type=int)
    p.add_argument("--gate")
    p.add_argument("--own-optimizer", action="store_true")
    p.add_argument("--eval-seconds", type=float, default=0.0)
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--pid-file")
    p.add_argument("--after-work-forever", action="store_true")
    p.add_argument("--after-work-pass", action="store_true")
    p.add_argument("--slow-worker-start", type=float, default=0.0)
    p.add_argument("--no-autocast", action="store_true")
    p.add_argument("--zero-each-micro-batch", action="store_true")
    p.add_argument("--relative-file")
    p.add_argument("--own-step", action="store_true")
    p.add_argument("--own-seed", type=int)
    args = p.parse_args()
    if args.relative_file:
        open(args.relative_file).read()
    if args.pid_file:
        with open(args.pid_file, "a") as f:
            f.write(f"{os.getpid()}\\n")

    ctx = autospeed.init(defaults={"batch_size": 32, "lr": 0.5, "epochs": 20, "eval_every_epochs": 1,
                                   "target_accuracy": 0.9, "max_train_seconds": 30})
    if args.own_seed is not None:
        torch.manual_seed(args.own_seed)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(16, 4, generator=g)
    def draw(n):
        x = torch.randn(n, 16, generator=g)
        return TensorDataset(x, (x @ w).argmax(1))
    train_ds, val_ds = draw(args.samples), draw(256)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)
            self.seen_dtype = None
        def forward(self, x):
            if self.training and torch.is_grad_enabled() and args.oom_above and x.shape[0] > args.oom_above:
                time.sleep(args.seconds_before_oom)  # work the attempt did before it ran out: on the train clock
                raise torch.OutOfMemoryError(f"simulated: {x.shape[0]} samples")
            on = torch.is_autocast_enabled(x.device.type)
            self.seen_dtype = str(torch.get_autocast_dtype(x.device.type)) if on else "none"
            return self.fc(x)

    model = Net()
    net = ctx.prepare_model(model, autocast=not args.no_autocast)
    def slow_start(worker_id):  # a loader worker's start-up (opening files, a tokenizer): on the train clock
        time.sleep(args.slow_worker_start)
    order = torch.Generator().manual_seed(args.own_seed) if args.own_seed is not None else None
    loader = ctx.dataloader(train_ds, generator=order,
                            **({"worker_init_fn": slow_start} if args.slow_worker_start else {}))
    if args.own_optimizer:
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
    else:
        opt = ctx.optimizer(torch.optim.SGD, model.parameters(), lr=ctx.lr())
    sched = ctx.scheduler(opt)
    micro_since_step, steps = 0, 0
    for x, y in ctx.steps(loader):
        if args.gate and not os.environ.get("AUTOSPEED_PREFLIGHT"):  # the search's preflight passes
            while not os.path.exists(os.path.join(args.gate, "go")):  # a state the test sets, polled
                time.sleep(0.01)
        if args.zero_each_micro_batch:
            opt.zero_grad()  # a mistake under accumulation: drops the step's earlier micro-batches
        loss = nn.functional.cross_entropy(net(x), y)
        ctx.backward(loss)
        micro_since_step += 1
        if args.own_step:
            opt.step()
            opt.zero_grad()
        elif ctx.step(opt, sched):
            steps += 1
            if args.observe:
                with open(args.observe, "a") as f:
                    from torch._dynamo.utils import counters  # graphs torch.compile captured in this process
                    f.write(json.dumps({"autocast": model.seen_dtype,
                                        "compiled": type(getattr(net, "inner", net)).__name__,
                                        "compiled_graphs": counters["stats"]["unique_graphs"],
                                        "fused": opt.defaults.get("fused"), "foreach": opt.defaults.get("foreach"),
                                        "micro_batches": micro_since_step, "micro_batch_size": len(x),
                                        "pid": os.getpid()}) + "\\n")
            micro_since_step = 0
            if args.crash_at_step == steps:
                raise RuntimeError(f"boom at step {steps}")
            if args.hang_at_step == steps:
                threading.Event().wait()  # a hang: blocks forever, on no clock
        if ctx.should_eval():
            with ctx.paused():
                time.sleep(args.eval_seconds)  # the evaluation's duration itself (what the test measures)
                vx, vy = val_ds.tensors
                with torch.no_grad():
                    acc = (model(vx.to(ctx.device)).argmax(1) == vy.to(ctx.device)).float().mean().item()
            if ctx.report(val_accuracy=acc, val_loss=loss.item()).stop:
                break
    if args.after_work_pass:  # after its result: a final test pass, then it exits
        with torch.no_grad():
            for _ in range(20):
                model(val_ds.tensors[0].to(ctx.device))
    if args.after_work_forever:  # after its result: after-work (a test pass, a checkpoint) that outlasts any allowance
        threading.Event().wait()
''')


@pytest.fixture
def tiny_script(tmp_path) -> Path:
    """The path of the tiny script (module docstring), written into the test's folder."""
    path = tmp_path / "tiny_train.py"
    path.write_text(TINY_SCRIPT)
    return path
