"""Command line. The only place exceptions become exit codes and messages.

Exit codes: 0 done, 1 runtime failure, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

from autospeed.errors import RunFailure, UserError

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors: one line, exit 2
        self.print_usage(sys.stderr)
        raise UserError(f"{self.prog}: {message}")


def _err(message: str) -> None:
    from autospeed.tracking import redact

    print(f"autospeed: error: {redact(message)}", file=sys.stderr)


# ---------------------------------------------------------------- train
def cmd_train(args) -> int:
    from autospeed import tracking
    from autospeed.environment import differences, environment
    from autospeed.recipe import load_recipe
    from autospeed.trainer import pick_device, train
    from autospeed.workloads import load_workload

    recipe = load_recipe(args.config)
    client = None
    if not args.no_track:
        client = tracking.connect(tracking.resolve_tracking_uri(args.tracking_uri))
    workload = load_workload(recipe.workload, recipe.workload_options)
    here = environment(pick_device(recipe))
    if recipe.measured and recipe.measured.environment:
        diff = differences(recipe.measured.environment, here)
        if diff:
            print(f"warning: {args.config} was measured elsewhere ({'; '.join(diff)}); "
                  f"its measured speed may not hold here", file=sys.stderr)

    out = sys.stderr if args.json else sys.stdout
    print(f"training {recipe.workload} to {recipe.target_accuracy:.3f} on {here['device_name']} "
          f"(budget {recipe.max_train_seconds:g} s train clock, {recipe.epochs:g} epochs)", file=out)

    def show(e) -> None:
        done = max(e.train_seconds / recipe.max_train_seconds, e.epoch / recipe.epochs)
        bar = "#" * int(20 * min(done, 1.0))
        print(f"  [{bar:<20}] epoch {e.epoch:6.2f}  val_acc {e.val_accuracy:.4f}  "
              f"train {e.train_seconds:7.2f} s  {e.samples_per_second:9.0f} samples/s", file=out, flush=True)

    result = train(recipe, workload, on_eval=show)
    if client is not None:
        run_id = tracking.log_train_run(client, args.experiment, recipe, result, recipe.to_yaml())
        print(f"logged MLflow run {run_id} in experiment '{args.experiment}'", file=out)
    if args.json:
        print(json.dumps({k: v for k, v in result.to_dict().items() if k != "history"}, indent=2))
    else:
        tta = f"{result.tta_seconds:.2f} s" if result.tta_seconds is not None else "-"
        print(f"status {result.status}  TTA {tta} (train clock)  best val_acc {result.best_val_accuracy:.4f}  "
              f"train {result.train_seconds:.2f} s  wall {result.wall_seconds:.2f} s  "
              f"compile {result.compile_seconds:.2f} s  {result.samples_per_second:.0f} samples/s  "
              f"peak {result.peak_memory_mb:.0f} MB")
        not_applied = [k for k, v in result.applied.items() if v is False and getattr(recipe, k, False)]
        if not_applied:
            print(f"not applied on {result.applied['device']}: {', '.join(not_applied)}")
    if result.error:
        _err(f"run {result.status}: {result.error}")
    return EXIT_FAILURE if result.status in ("failed", "oom", "diverged") else EXIT_OK


def cmd_workloads(args) -> int:
    from autospeed.workloads import describe

    for name, line in describe():
        print(f"{name:<10} {line}")
    print(f"{'<plugin>':<10} package.module:factory returning autospeed.workloads.Workload (see README)")
    return EXIT_OK


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="autospeed", description="Find the training recipe that reaches a target accuracy fastest.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser("train", help="train one recipe (no Ray needed)")
    t.add_argument("--config", required=True, help="recipe YAML (e.g. best.yaml from `autospeed export`)")
    t.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    t.add_argument("--experiment", default="autospeed-train", help="MLflow experiment for the run")
    t.add_argument("--no-track", action="store_true", help="do not log an MLflow run")
    t.add_argument("--json", action="store_true", help="print the result object as JSON on stdout")
    t.set_defaults(func=cmd_train)

    w = sub.add_parser("workloads", help="list the built-in workloads")
    w.set_defaults(func=cmd_workloads)
    return p


def main(argv: list[str] | None = None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UserError as e:
        if debug:
            traceback.print_exc()
        _err(str(e))
        return EXIT_BAD_INPUT
    except RunFailure as e:
        if debug:
            traceback.print_exc()
        _err(str(e))
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug or an unexpected environment: say so in one line
        if debug:
            traceback.print_exc()
        else:
            _err(f"{type(e).__name__}: {e} (rerun with --debug for the traceback)")
        return EXIT_FAILURE


if __name__ == "__main__":
    raise SystemExit(main())
