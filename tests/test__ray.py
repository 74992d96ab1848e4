"""Ray set-up and the Ray-version workarounds (autospeed/_ray.py). A failure here after a Ray
upgrade means a private attribute moved: fix _ray.py, nothing else reaches into Ray."""

from __future__ import annotations

import logging

from autospeed import _ray


def test_a_restored_tuner_runs_with_this_process_callbacks_and_stopper(tmp_path):
    """`Tuner.restore` takes no run_config; _ray.reattach replaces the pickled callbacks and
    stopper through Ray's internal tuner. This fails loudly when Ray moves that attribute."""
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler
    from ray.tune.search import BasicVariantGenerator

    tuner = tune.Tuner(lambda config: None, run_config=tune.RunConfig(name="x", storage_path=str(tmp_path)))
    old, old_tune_config = _ray.run_config_of(tuner), _ray.tune_config_of(tuner)
    callback, stopper = tune.Callback(), tune.stopper.MaximumIterationStopper(1)
    search, scheduler = BasicVariantGenerator(), FIFOScheduler()
    _ray.reattach(tuner, [callback], stopper, verbose=False, search=search, scheduler=scheduler)
    run_config, tune_config = _ray.run_config_of(tuner), _ray.tune_config_of(tuner)
    assert isinstance(run_config, tune.RunConfig) and run_config is old
    assert run_config.callbacks == [callback] and run_config.stop is stopper and run_config.verbose == 0
    assert isinstance(tune_config, tune.TuneConfig) and tune_config is old_tune_config
    assert tune_config.search_alg is search and tune_config.scheduler is scheduler


def test_ray_snapshot_race_traceback_is_dropped_and_real_failures_kept():
    """Ray Tune 2.60 races its own snapshot copy against the next snapshot's temp file
    (seen in CI: a FileNotFoundError traceback on stderr of a search that was fine)."""
    _ray.quiet_ray()
    logger = logging.getLogger("ray.tune.execution.experiment_state")
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append
    logger.addHandler(handler)
    try:
        for exc in (FileNotFoundError(2, "Failed to open local file '/tmp/ray/x/driver_artifacts/"
                                         ".fc86-tmp-searcher-state-2026.pkl'"),
                    PermissionError(13, "Permission denied: '/store/faults/experiment_state.json'")):
            try:
                raise exc
            except OSError:
                logger.error("Saving experiment state to storage at '/store' failed with exception: ", exc_info=True)
    finally:
        logger.removeHandler(handler)
    assert [type(r.exc_info[1]) for r in seen] == [PermissionError]
