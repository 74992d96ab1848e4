"""MLflow names (docs/design.md "Tracking layout"): every tag, metric and kind of run, defined once and shared by
the writers (search, train: writers.py) and the readers (export, report, runs.py). Strings only: no import."""

# ---- tags ----
TAG_SEARCH_ID = "autospeed.search_id"
TAG_TRIAL_ID = "autospeed.trial_id"
TAG_KIND = "autospeed.kind"
TAG_STATUS = "autospeed.status"
TAG_BASELINE = "autospeed.baseline"
TAG_ERROR = "autospeed.error"
TAG_DUPLICATE_OF = "autospeed.duplicate_of"  # on a trial whose recipe an earlier trial already trained
TAG_RERUN_OF = "autospeed.rerun_of"  # on a trial that trains an unfinished trial's recipe again after a rebuilt resume
TAG_APPLIED = "autospeed.applied"  # on a trial: each knob and the value that took effect (JSON)
# and, for the MLflow UI's columns, the values the batch knobs resolved to (micro_batch_size auto, lr_scaling)
APPLIED_COLUMNS = ("micro_batch_size", "accumulation_steps", "effective_batch", "lr")
TAG_CONFIRMED_BEST = "autospeed.confirmed_best_trial"  # on the parent: the trial confirmation picked
TAG_CONFIRM_REPEAT = "autospeed.confirm_repeat"  # on each confirm run: 0 .. repeats-1
# on the parent: the baseline trial whose TTA is the baseline's first confirmation sample (confirm.py)
TAG_CONFIRM_CARRIED = "autospeed.confirm_carried_trial"
TAG_EXPERIMENT_DIR = "autospeed.experiment_dir"  # on the parent: Ray experiment and optuna.db of the search
TAG_TRIALS = "autospeed.trials"  # on the parent: trials asked for (the `trials` param is the count it began with)
TAG_CONFIRM_TRIALS = "autospeed.confirm_trials"  # on each confirm run: how many trials the confirmation chose from
TAG_PARENT = "mlflow.parentRunId"
# on every run, from its environment: where it ran ("host/<Ray node id>" under Ray, else the host name)
TAG_NODE = "autospeed.env.node"
TAG_DEVICE_NAME = "autospeed.env.device_name"
KIND_SEARCH, KIND_TRIAL, KIND_CONFIRM, KIND_TRAIN, KIND_PROBE = "search", "trial", "confirm", "train", "probe"
KIND_ABLATION = "ablation"  # the confirmed winner re-timed with one knob set back to the baseline's value
TAG_PROBE_CONFIG = "autospeed.probe_config"  # on each probe run: its systems configuration's number
TAG_PROBE_FIXED = "autospeed.probe_fixed"  # on the parent: the knob values the probe fixed (JSON)
TAG_PROBE_MARGIN = "autospeed.probe_margin"  # on the parent: why (speed-up vs the noise it had to beat)
TAG_PROBE_NEUTRALITY = "autospeed.probe_neutrality"  # on the parent: each knob change's maths-neutrality (JSON)
# on the parent: the best lr / batch_size at each ASHA rung and their trend to the job's length (search/rung_trend.py)
TAG_HORIZON_TREND = "autospeed.horizon_trend"

# ---- metrics ----
# per evaluation, step = optimizer step: these and every metric the workload reports (val_accuracy, val_loss, ...)
M_VAL_ACCURACY = "val_accuracy"
M_TRAIN_LOSS = "train_loss"
M_TRAIN_SECONDS = "train_seconds"
M_SAMPLES_PER_SECOND = "samples_per_second"
# where the workload counts tokens and model FLOPs (autospeed.train.throughput): a GPT's tokens/s and MFU
M_TOKENS_PER_SECOND, M_MFU = "tokens_per_second", "mfu"
EVAL_METRICS = (M_TRAIN_LOSS, M_TRAIN_SECONDS, M_SAMPLES_PER_SECOND, M_TOKENS_PER_SECOND, M_MFU)
METRIC_NAMES = "metric_names"  # key of a trial's report listing the workload's metrics in it
# final, once per run: these and best_<metric> for every metric the workload reports
M_TTA = "tta_seconds"
M_BEST_VALUE = "best_value"  # best value of the target metric, in its direction
M_BEST_VAL_ACCURACY = "best_val_accuracy"
M_OBJECTIVE = "objective"
M_WALL_SECONDS = "wall_seconds"
# reached runs: process start (a fresh process's first run; else train() entry) to the end of the evaluation
# that met the target (autospeed.train.result); the tag TAG_WALL_ORIGIN says which
M_WALL_TO_TARGET = "wall_to_target_seconds"
TAG_WALL_ORIGIN = "autospeed.wall_clock_origin"
# Long jobs (docs/design.md "Long jobs: predicted time to target"): a trial that did not reach its target, ranked by
# where its curve would meet it (autospeed.predict); never logged as tta_seconds, which stays for measurements
M_TTA_PREDICTED, M_TTA_PREDICTED_LOW, M_TTA_PREDICTED_HIGH = (
    "tta_predicted_seconds", "tta_predicted_low_seconds", "tta_predicted_high_seconds")
TAG_TTA_SOURCE = "autospeed.tta_source"  # measured | predicted | none
# a wsd trial's cooldown branch (autospeed.train.cooldown), at the evaluation's step: cooldown_<metric> for every
# metric the workload reports, the branch's optimizer steps and its seconds (off the train clock: exploration
# cost); final: the seconds of all its branches
M_COOLDOWN_PREFIX = "cooldown_"
M_COOLDOWN_STEPS, M_COOLDOWN_SECONDS = f"{M_COOLDOWN_PREFIX}steps", f"{M_COOLDOWN_PREFIX}seconds"
M_COOLDOWN_TOTAL_SECONDS = f"{M_COOLDOWN_PREFIX}total_seconds"
# `autospeed train` of an exported winner with a trajectory (autospeed.train.on_track): the predicted TTA it was
# checked against, measured TTA / predicted, pace (live seconds / predicted seconds to the same metric) at each
# checkpoint, the verdict and where the prediction came from
M_PREDICTION_TTA = "prediction_tta_seconds"
M_TTA_OVER_PREDICTION = "tta_over_prediction"
# its two halves (TTA = samples to target / samples per second): samples to target over the prediction's (the maths),
# samples per second over the prediction's (the systems); where both sides count samples
M_SAMPLES_OVER_PREDICTION, M_THROUGHPUT_OVER_PREDICTION = "samples_over_prediction", "throughput_over_prediction"
M_PACE_OVER_PREDICTION = "pace_over_prediction_{percent}pct"  # 10pct, 25pct, 50pct
TAG_PREDICTION_VERDICT = "autospeed.prediction_verdict"  # on track | behind/ahead of its prediction | not reached
TAG_PREDICTION_SOURCE = "autospeed.prediction_source"  # confirmation | trial | prediction
TAG_TTA_NOTE = "autospeed.tta_note"  # what a prediction rests on, or why there is none
TTA_MEASURED, TTA_PREDICTED, TTA_NONE = "measured", "predicted", "none"
TTA_NOTE_PREDICT_OFF = "predict is off"  # the note of a trial that missed in a search without predict
M_COMPILE_SECONDS = "compile_seconds"
M_PEAK_MEMORY_MB = "peak_memory_mb"
M_OOM = "oom"  # on a probe run: 1 when it ran out of memory
M_PROBE_SECONDS = "probe_seconds"  # on the parent: wall seconds of the probe stage (its whole cost)
M_PROBE_SPEEDUP = "probe_speedup"  # on the parent: the fixed configuration's speed / the default's
M_PROBE_NOISE = "probe_noise"  # on the parent: the timing noise a non-default value had to beat
# parent
M_BEST_TTA = "best_tta_seconds"
M_BASELINE_TTA = "baseline_tta_seconds"
M_SPEEDUP = "speedup_vs_baseline"
# confirmation (docs/design.md "Confirmation runs"), on the parent run; export and report read them
M_CONFIRM_MEDIAN = "confirm_tta_seconds_median"
M_CONFIRM_MIN = "confirm_tta_seconds_min"
M_CONFIRM_MAX = "confirm_tta_seconds_max"
M_CONFIRM_REPEATS = "confirm_repeats"
M_CONFIRM_BASELINE_MEDIAN = "confirm_baseline_tta_seconds_median"
M_CONFIRM_SPEEDUP = "confirm_speedup_vs_baseline"
M_CONFIRM_SPEEDUP_CI_LOW = "confirm_speedup_ci_low"  # bootstrap 90% interval over the seeds
M_CONFIRM_SPEEDUP_CI_HIGH = "confirm_speedup_ci_high"
# predicted range of a 7-a-side re-measurement's speed-up (outcome.remeasure_interval): a prediction
M_CONFIRM_REMEASURE_LOW, M_CONFIRM_REMEASURE_HIGH = "confirm_remeasure_speedup_low", "confirm_remeasure_speedup_high"
M_CONFIRM_CONFIDENCE = "confirm_speedup_ci_confidence"  # per-look level of the interval (sequential repeats)
M_CONFIRM_WALL_MEDIAN = "confirm_wall_to_target_seconds_median"  # process start to target, fresh processes
M_CONFIRM_BASELINE_WALL_MEDIAN = "confirm_baseline_wall_to_target_seconds_median"
M_CONFIRM_WALL_SPEEDUP = "confirm_wall_speedup_vs_baseline"
TAG_ABLATION = "autospeed.ablation"  # on the parent: JSON knob -> {baseline value, medians, speed-up lost}
TAG_ABLATION_KNOB = "autospeed.ablation_knob"  # on each ablation run: the knob set back (or "none": the winner)
M_CONFIRM_TRIALS = "confirm_trials_total"  # trials the confirmation chose from (an extended search confirms again)
# confirm.baseline_tta_seconds: on the parent, where the baseline's TTA came from (measured | given) and the note
TAG_CONFIRM_BASELINE_SOURCE = "autospeed.confirm_baseline_source"
TAG_CONFIRM_BASELINE_NOTE = "autospeed.confirm_baseline_note"
BASELINE_MEASURED, BASELINE_GIVEN = "measured", "given"
# confirm.compile_cache, on the parent: the inductor cache every confirmation and ablation run compiled from, so
# which compile cost the confirmed TTAs and speed-up include: cold (a new empty folder per run, as a new machine
# pays) or warm (the machine's shared folder). A search without the tag confirmed warm (before it existed).
TAG_CONFIRM_COMPILE_CACHE = "autospeed.confirm_compile_cache"
COMPILE_CACHE_COLD, COMPILE_CACHE_WARM = "cold", "warm"
# a compiled winner confirmed, trained again the two other ways production pays its compile (search/compile_ways.py)
KIND_COMPILE_WAY, TAG_COMPILE_WAY = "compile_way", "autospeed.compile_way"  # tag: new_machine_shipped_cache, ...
# what the search cost, on the parent: confirmation runs' train clock, and the probe and trials' wall seconds,
# each also in baseline runs (/ the baseline's median TTA, measured or given)
M_CONFIRM_COMPUTE_SECONDS = "confirm_compute_seconds"
M_CONFIRM_COMPUTE_BASELINE_RUNS = "confirm_compute_baseline_runs"
M_EXPLORATION_SECONDS = "exploration_seconds"
M_EXPLORATION_BASELINE_RUNS = "exploration_baseline_runs"

DEFAULT_TRAIN_EXPERIMENT = "autospeed-train"
TAG_ENVIRONMENT = "autospeed.environment"  # the whole environment as JSON
