"""Command line. The only place exceptions become exit codes and messages.

Exit codes: 0 done, 1 runtime failure, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import traceback

from autospeed.errors import Interrupted, RunFailure, UserError

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors: one line, exit 2
        raise UserError(f"{self.prog}: {message} (see: {self.prog} --help)")


def _err(message: str) -> None:
    from autospeed.track.store import redact

    print(f"autospeed: error: {redact(message)}", file=sys.stderr)


# ---------------------------------------------------------------- train
def cmd_train(args) -> int:
    # Only what the run needs: torch, the trainer, the recipe; MLflow (autospeed.track) only when tracking,
    # Ray only for data-parallel workers (experiments/startup.py times this start-up).
    from autospeed.recipe import load_recipe
    from autospeed.run_recipe import train
    from autospeed.script.options import is_script
    from autospeed.show import summaries
    from autospeed.train.environment import differences, environment, threads_as_measured
    from autospeed.train.trainer import pick_device
    from autospeed.workloads import check_target, load_workload

    recipe = _with_script(load_recipe(args.config), args)
    if is_script(recipe.workload) and recipe.measured is None:  # hand-written: the script's own defaults under it
        from autospeed.script.preflight import under_script_defaults

        recipe = under_script_defaults(recipe, args.config, sys.stderr if args.json else sys.stdout)
    client = None
    if not args.no_track:
        from autospeed.track import names, writers
        from autospeed.track.store import connect, resolve_tracking_uri

        client = connect(resolve_tracking_uri(args.tracking_uri))
    target = recipe.resolved_target
    workload = None  # a user's script: its metrics are known when it reports
    try:
        if not is_script(recipe.workload):
            workload = load_workload(recipe.workload, recipe.workload_options)
            check_target(target, workload.metrics, recipe.workload, shorthand=recipe.target is None)
    except UserError as e:
        raise UserError(f"{args.config}: {e}") from None
    device = pick_device(recipe)
    threads = threads_as_measured(recipe.measured.environment if recipe.measured else None, device)
    if threads:  # as the runs that measured it (a script's process gets them too)
        import torch

        torch.set_num_threads(threads)
    here = environment(device)
    if recipe.measured and recipe.measured.environment:
        diff = differences(recipe.measured.environment, here)
        if diff:
            print(f"warning: {args.config} was measured elsewhere or otherwise ({'; '.join(diff)}: then -> here); "
                  f"its measured speed may not hold here", file=sys.stderr)

    out = sys.stderr if args.json else sys.stdout
    print(summaries.train_start_line(recipe, target, here["device_name"],
                                     here["torch_threads"] if device.type == "cpu" and recipe.workers == 1 else None),
          file=out)
    cache = None if args.no_compile_cache else _shipped_compile_cache(recipe, args.config, out)
    from autospeed.train.on_track import on_track_for

    checker = on_track_for(recipe, out)  # an exported winner's predicted curve, checked live against this run

    if recipe.workers > 1 and not is_script(recipe.workload):  # a script starts its own workers (torchrun-style)
        # Ray Train starts the workers and their process group; rank 0's result comes back (no live bar:
        # the evaluations happen in the workers' processes).
        from autospeed.parallel.launch import train_on_workers

        try:
            result = train_on_workers(recipe)
        except UserError as e:
            raise UserError(f"{args.config}: {e}") from None
        if checker is not None:
            checker.replay(result.history)
    else:
        from autospeed.show.live import TrainProgress

        bar = TrainProgress(recipe.max_train_seconds, recipe.epochs, target, stream=out, max_steps=recipe.max_steps)
        if checker is not None:
            checker.say = bar.note
        try:
            result = train(recipe, workload, on_eval=checker.watching(bar.update) if checker else bar.update,
                           num_threads=threads)
        finally:
            bar.close()
        # which compile this run paid (shipped cache, warm, cold); a script or workers compile in their processes
        if workload is not None and result.applied.get("compile", "none") != "none":
            from autospeed.train.compile_cache import hits_line

            print(hits_line(shipped=cache is not None), file=out)
    prediction = checker.finish(result.tta_seconds, result.train_seconds) if checker is not None else None
    if client is not None:
        run_id = writers.log_train_run(client, args.experiment or names.DEFAULT_TRAIN_EXPERIMENT, recipe, result,
                                        prediction)
        print(f"logged MLflow run {run_id} in experiment '{args.experiment}'", file=out)
    if args.json:
        shown = {k: v for k, v in result.to_dict().items() if k != "history"}
        print(json.dumps({**shown, **({"prediction": prediction} if prediction else {})}, indent=2))
    else:
        print("\n".join(summaries.train_result_lines(result, target)))
    if result.error:
        _err(f"run {result.status}: {result.error}")
    return EXIT_FAILURE if result.status.infeasible else EXIT_OK


def _shipped_compile_cache(recipe, config: str, out):
    from autospeed.train.compile_cache import load_shipped  # torch: only when training

    return load_shipped(recipe, config, out)


def _with_script(recipe, args):
    """The recipe with `--script SCRIPT -- ARGS` as its workload; an exported script recipe names its own."""
    from autospeed.script.options import SCRIPT, check_script_options, is_script, script_options

    if args.script is None:
        if args.script_args:
            raise UserError(f"arguments after -- ({' '.join(args.script_args)}) are for a script; give it with "
                            f"--script train.py")
        if is_script(recipe.workload):
            check_script_options(recipe.workload_options, f"{args.config}: workload_options")
        return recipe
    options = {**(recipe.workload_options if is_script(recipe.workload) else {}),
               **script_options(args.script, args.script_args or recipe.workload_options.get("args", []))}
    check_script_options(options, "--script")
    return recipe.model_copy(update={"workload": SCRIPT, "workload_options": options})


# ---------------------------------------------------------------- search
def cmd_search(args) -> int:
    from pathlib import Path

    from autospeed.search import run_search
    from autospeed.search.confirm_text import summary_lines
    from autospeed.show.summaries import search_summary_lines
    from autospeed.space import load_spec, with_script

    spec = with_script(load_spec(args.space), args.script, args.script_args)
    if args.trials is not None and args.trials < 1:
        raise UserError(f"--trials: must be >= 1, got {args.trials}")
    if args.name:
        spec = spec.model_copy(update={"name": args.name})
    try:
        outcome = run_search(spec, Path(args.space).read_text(), args.space, trials=args.trials,
                             tracking_uri=args.tracking_uri, storage_path=args.storage_path,
                             ray_address=args.ray_address, resume=args.resume, seed=args.seed, verbose=args.verbose)
    except Interrupted as e:  # stopped for a reason outside the user's keys, resumable: said, with how to resume
        _err(f"search stopped: {e}")
        print(f"interrupted; continue with: {_resume_command(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    confirmation = summary_lines(outcome.confirmation) if outcome.confirmation is not None else []
    print("\n".join(search_summary_lines(outcome, spec, confirmation)))
    if outcome.stop_reason:
        _err(f"search stopped: {outcome.stop_reason}")
        return EXIT_FAILURE
    if outcome.interrupted:
        print(f"interrupted; continue with: {_resume_command(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def _resume_command(args) -> str:
    """The exact command that continues this search (credentials in the URI hidden)."""
    import shlex

    from autospeed.track.store import redact

    words = ["autospeed", "search", "--space", args.space]
    for flag in ("script", "name", "tracking_uri", "storage_path", "ray_address"):
        if getattr(args, flag):
            words += [f"--{flag.replace('_', '-')}", redact(str(getattr(args, flag)))]
    return shlex.join(words + ["--resume"] + (["--", *args.script_args] if args.script_args else []))


def cmd_export(args) -> int:
    from autospeed.recipe import load_recipe
    from autospeed.show.summaries import export_lines
    from autospeed.track.export import export
    from autospeed.track.store import connect, resolve_tracking_uri

    client = connect(resolve_tracking_uri(args.tracking_uri))
    path, best = export(client, args.name, args.out)
    print("\n".join(export_lines(path, best, load_recipe(path).measured)))
    return EXIT_OK


def cmd_explain(args) -> int:
    from autospeed.search.ablation import explain
    from autospeed.track.store import connect, resolve_tracking_uri

    if args.repeats is not None and args.repeats < 1:
        raise UserError(f"--repeats: {args.repeats} is not a number of rounds; give 1 or more (default: the "
                        f"search's confirm.repeats)")
    client = connect(resolve_tracking_uri(args.tracking_uri))
    explain(client, args.name, args.storage_path, args.repeats)
    print(f"recorded on search '{args.name}': autospeed export writes it as measured.ablation, autospeed report "
          f"draws it")
    return EXIT_OK


def cmd_report(args) -> int:
    from autospeed.search import search_root
    from autospeed.show.report import write_report
    from autospeed.show.summaries import report_lines
    from autospeed.track.store import connect, resolve_tracking_uri

    client = connect(resolve_tracking_uri(args.tracking_uri))
    searches = search_root(args.storage_path, args.name) if args.storage_path else None
    report = write_report(client, args.name, args.out, searches=searches)
    print("\n".join(report_lines(report)))
    return EXIT_OK


def cmd_ui(args) -> int:
    from autospeed.show.ui import serve
    from autospeed.track.store import resolve_tracking_uri

    return serve(resolve_tracking_uri(args.tracking_uri), host=args.host, port=args.port, name=args.name)


def cmd_validate(args) -> int:
    from autospeed.show.summaries import validate_line
    from autospeed.space import load_spec

    print(validate_line(args.space, load_spec(args.space)))
    return EXIT_OK


def cmd_workloads(args) -> int:
    from autospeed.show.summaries import workloads_lines

    print("\n".join(workloads_lines()))
    return EXIT_OK


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="autospeed", description="Find the training recipe that reaches a target accuracy fastest.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser("train", help="train one recipe (no Ray needed for workers: 1; Ray Train for more)")
    t.add_argument("--config", required=True, help="recipe YAML (e.g. best.yaml from `autospeed export`)")
    t.add_argument("--script", help="your training script (autospeed.init inside); its arguments follow --")
    t.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    # default: autospeed.track.names.DEFAULT_TRAIN_EXPERIMENT, not imported here: no tracking import without tracking
    t.add_argument("--experiment", help="MLflow experiment for the run (default: autospeed-train)")
    t.add_argument("--no-track", action="store_true", help="do not log an MLflow run")
    t.add_argument("--json", action="store_true", help="print the result object as JSON on stdout")
    t.add_argument("--no-compile-cache", action="store_true",
                   help="ignore the recipe's shipped compile cache (measured.compile_cache): compile from scratch")
    t.set_defaults(func=cmd_train)

    uri_help = "MLflow tracking URI (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"
    s = sub.add_parser("search", help="search for the recipe that reaches the target fastest")
    s.add_argument("--space", required=True, help="search-space YAML (e.g. search_spaces/fast.yaml)")
    s.add_argument("--script", help="search your own training script (autospeed.init inside); its arguments "
                                    "follow --: autospeed search --script train.py --space s.yaml -- --data d/")
    s.add_argument("--trials", type=int, help="number of trials (default: budget.trials)")
    s.add_argument("--name", help="search name = MLflow experiment (default: the file's name)")
    s.add_argument("--tracking-uri", help=uri_help)
    s.add_argument("--storage-path", help="where Ray keeps the experiment (default: ./autospeed_results)")
    s.add_argument("--ray-address", help="join an existing Ray cluster (default: start Ray locally)")
    s.add_argument("--resume", action="store_true",
                   help="continue the latest search of this name; with --trials N above its count, extend it to N "
                        "trials")
    s.add_argument("--seed", type=int, help="sampler seed (default: sampler.seed)")
    s.add_argument("--verbose", action="store_true", help="show Ray's own output")
    s.set_defaults(func=cmd_search)

    e = sub.add_parser("export", help="write the best reached trial as a recipe")
    e.add_argument("--name", required=True, help="the search's name")
    e.add_argument("--tracking-uri", help=uri_help)
    e.add_argument("--out", default="best.yaml", help="output recipe (default: best.yaml)")
    e.set_defaults(func=cmd_export)

    x = sub.add_parser("explain", help="why the confirmed winner is faster: re-time it with each knob set back to "
                                       "the baseline's, one at a time (the ablation), each run in a fresh process")
    x.add_argument("--name", required=True, help="the search's name")
    x.add_argument("--tracking-uri", help=uri_help)
    x.add_argument("--storage-path", help="where the search kept its files (default: ./autospeed_results)")
    x.add_argument("--repeats", type=int, help="interleaved rounds (default: the search's confirm.repeats)")
    x.set_defaults(func=cmd_explain)

    r = sub.add_parser("report", help="write report.html and figures for a search, log them to its run")
    r.add_argument("--name", required=True, help="the search's name")
    r.add_argument("--tracking-uri", help=uri_help)
    r.add_argument("--storage-path", help="where the search kept its Optuna study (default: ./autospeed_results)")
    r.add_argument("--out", help="output folder (default: <storage-path>/<name>/<search id>/report)")
    r.set_defaults(func=cmd_report)

    u = sub.add_parser("ui", help="start the MLflow UI for the tracking store (on 127.0.0.1)")
    u.add_argument("--tracking-uri", help=uri_help)
    u.add_argument("--port", type=int, default=5000, help="port (default: 5000)")
    u.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default: 127.0.0.1; the UI has no login, bind others knowingly)")
    u.add_argument("--name", help="print a link straight to this search's experiment")
    u.set_defaults(func=cmd_ui)

    v = sub.add_parser("validate", help="check a search-space file without running it")
    v.add_argument("--space", required=True)
    v.set_defaults(func=cmd_validate)

    w = sub.add_parser("workloads", help="list the built-in workloads")
    w.set_defaults(func=cmd_workloads)
    return p


def split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(autospeed's arguments, the user script's own: everything after the first `--`)."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def main(argv: list[str] | None = None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        own, script_args = split_script_args(list(sys.argv[1:] if argv is None else argv))
        args = build_parser().parse_args(own)
        args.script_args = script_args
        if not hasattr(args, "script"):
            args.script = None
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


def entry() -> None:
    """The `autospeed` command (and `python -m autospeed`): main(), then Python's own exit, less its
    teardown. Once the exit handlers have run (Ray's shutdown, MLflow's, the confirmation process's)
    everything is recorded and flushed, and tearing down torch, Ray's core worker and thousands of
    modules only costs seconds (experiments/results/process_exit.md).
    Registered before any of those handlers, this one runs after them all."""
    code = EXIT_FAILURE

    def exit_without_teardown() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    atexit.register(exit_without_teardown)
    try:
        code = main()
    except SystemExit as e:  # --help, --version: argparse exits itself
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        raise
    sys.exit(code)


if __name__ == "__main__":
    entry()
