"""The experiments behind the README's results: one script each, and one entry point for all of them.

    python -m experiments list                # every script, its full commands and the results files they write
    python -m experiments all                 # regenerate every results file (hours); GPU scripts need a GPU
    python -m experiments all --quick         # a smoke pass of every script, into a temporary folder
    python -m experiments NAME                # regenerate NAME's results files (its full commands)
    python -m experiments NAME --quick        # NAME's smoke pass
    python -m experiments NAME ARGS...        # = python experiments/NAME.py ARGS... (bash for a .sh)
    python -m experiments stale               # exit 1 if a results file the docs cite predates its code

Run from the repository root. Every script still runs on its own, `python experiments/NAME.py ARGS...`;
EXPERIMENTS below is the one list of them: what `all` runs, in order, with each full command as the
results files' headers record it, the quick pass's arguments, and the code each one measures. Every file
under experiments/results/ is written by a command listed here, and every file a command lists is there
(tests/experiments/test_all.py checks both ways). `stale` reads the commit of each results file README.md
or docs/ cite and fails when a later commit changed a path its experiment measures: the figure no longer
describes the code, and the command it prints regenerates it.

The quick pass (`--quick`) runs each script with tiny budgets, trials and repeats on
experiments/quick/ (a small mnist1d space and a hand-written recipe), writing only into its folder, never over
experiments/results/. It measures nothing: its files say so in their headers, and its scripts hold the
CPU lock shared where they would hold it exclusively (EXPERIMENTS_QUICK=1). No quick pass starts Ray
(a one-trial search takes 25 s on 2 cores): where a script's work is a search, its quick pass takes
the script's own way around it (a recipe given instead of a search, `--no-search`, `--report-only` of
committed measurements) and runs the rest, the results file's tables included, on a tiny real run.
The scripts run one at a time (--jobs N: N), each forked from one process that imported torch and
autospeed once (--fresh: each in a new interpreter), with one torch thread each (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

RESULTS = "experiments/results"
QUICK = "experiments/quick"  # the quick pass's space and recipe; {quick} in quick arguments


@dataclass(frozen=True)
class Run:
    """One full command of a script: its arguments and the results files it writes (from the repository root)."""

    args: tuple[str, ...]
    writes: tuple[str, ...]
    # Paths this run alone depends on besides its experiment's `measures` (its space file, an input results file).
    measures: tuple[str, ...] = ()
    # An archived run: the commit whose script wrote these files (`git show AT:experiments/FILE`). Today's script
    # writes other files, so `all` does not repeat it and `stale` skips it: it is a record of that commit, and the
    # docs cite it as one. Listed so that every tracked results file names the command that wrote it.
    at: str = ""
    note: str = ""  # what a reader of the listing needs besides the command (files renamed when kept, ...)


@dataclass(frozen=True)
class Experiment:
    name: str
    file: str  # under experiments/
    what: str
    runs: tuple[Run, ...] = ()  # what `all` runs, in order
    # The repository paths its figures depend on (a folder ends in /), the script itself left implicit: a commit
    # that changes one after a results file's commit makes that file stale. Each is a path whose change can move
    # the numbers, no wider: the code under measurement, the space files and recipes it runs, the results it
    # reads. Empty only with `unmeasured`, saying why no path list can tell (stale skips its files, saying that).
    measures: tuple[str, ...] = ()
    unmeasured: str = ""
    # The quick pass's arguments ({out}: its folder, {quick}: experiments/quick) and what it writes there, the
    # results file first; None: no quick pass.
    quick: tuple[str, ...] | None = None
    quick_writes: tuple[str, ...] = ()
    gpu: bool = False  # needs a CUDA GPU: `all` skips it without one, saying so
    helper: bool = False  # not an experiment (writes no results): `all` never runs it
    note: str = field(default="")

    @property
    def path(self) -> str:
        return f"experiments/{self.file}"

    def paths(self, run: Run) -> tuple[str, ...]:
        """What `run`'s results depend on: the script, the experiment's paths and the run's own; () when the
        experiment declares none (see `unmeasured`)."""
        return tuple(dict.fromkeys((self.path, *self.measures, *run.measures))) if self.measures else ()


def _r(*args: str, writes: tuple[str, ...], measures: tuple[str, ...] = (), at: str = "", note: str = "") -> Run:
    return Run(tuple(args), tuple(f"{RESULTS}/{w}" for w in writes), measures, at, note)


# What the experiments measure, by layer (docs/layout.md). TRAIN: one recipe trained (the trainer, the recipe
# schema, the workload contract and registry); each experiment adds the built-in workloads it trains, by file
# (BUILTIN: mnist1d and digits, beside cifar10 and synthetic; LM_DATA: lm), so that a change to the GPU-scale
# workloads flags none of the CPU results. SEARCH: a search as `autospeed search` runs it, its export and
# `autospeed train` of the export (Ray, Optuna and MLflow glue, confirmation, the speed-up's statistics, the
# command itself). PACKAGE: a command's start-up and exit, where importing or tearing down any module counts.
# TIMING: the experiments' own fresh-process timing and search run as a user runs it (experiments/_common.py).
TRAIN = ("autospeed/train/", "autospeed/run_recipe.py", "autospeed/recipe.py",
         *(f"autospeed/workloads/{f}" for f in ("__init__.py", "base.py", "_registry.py", "_cache.py",
                                                 "_memory_limit.py")))
BUILTIN, LM_DATA = "autospeed/workloads/_builtin.py", "autospeed/workloads/_lm.py"
SEARCH = (*TRAIN, "autospeed/search/", "autospeed/_ray.py", "autospeed/parallel/", "autospeed/track/",
          "autospeed/space.py", "autospeed/space_sections.py", "autospeed/outcome.py", "autospeed/predict.py",
          "autospeed/cli.py", "autospeed/show/summaries.py", "autospeed/show/leaderboard.py")
PACKAGE = ("autospeed/",)
TIMING = ("experiments/_common.py",)
FAST, LM, SMOKE, LONG = (f"search_spaces/{n}.yaml" for n in ("fast", "lm", "smoke", "long"))
SPEEDUP_BEST = f"{RESULTS}/speedup_best.yaml"  # fast.yaml's exported winner: noise, startup, compile_cache train it


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "speedup", "speedup.py", "speed-up of a search's exported recipe over the baseline, as production runs",
        runs=(_r(writes=("speedup.md", "speedup_best.yaml"), measures=(FAST, BUILTIN)),
              # its own --work: noise.py compares with the fast.yaml search left in /tmp/autospeed-speedup
              _r("--space", LM, "--work", "/tmp/autospeed-speedup-lm", "--out", f"{RESULTS}/speedup_lm.md",
                 writes=("speedup_lm.md", "speedup_lm_best.yaml"), measures=(LM, LM_DATA)),
              # the long job's export: its speed-up (goal 3x) and the production TTA it predicts (issue 43)
              _r("--space", LONG, "--goal", "3", "--work", "/tmp/autospeed-speedup-long", "--out",
                 f"{RESULTS}/speedup_long.md", writes=("speedup_long.md", "speedup_long_best.yaml"),
                 measures=(LONG, BUILTIN))),
        quick=("--space", "{quick}/space.yaml", "--best", "{quick}/recipe.yaml", "--repeats", "1",
               "--baseline-seconds", "0", "--baseline-epochs", "0", "--work", "{out}/speedup-work",
               "--out", "{out}/speedup.md"),
        quick_writes=("speedup.md", "speedup_best.yaml"), measures=(*SEARCH, *TIMING)),
    Experiment(
        "noise", "noise.py", "timing noise of one recipe trained 10 times (after speedup: its recipe and search)",
        runs=(_r("--recipe", SPEEDUP_BEST, "--runs", "10", "--out", f"{RESULTS}/noise.md",
                 writes=("noise.md", "noise.png")),),
        quick=("--recipe", "{quick}/recipe.yaml", "--runs", "2", "--no-compare", "--out", "{out}/noise.md"),
        quick_writes=("noise.md", "noise.png"),
        # track/: its comparison reads the trials of speedup's search back from MLflow
        measures=(*TRAIN, BUILTIN, "autospeed/track/", SPEEDUP_BEST)),
    Experiment(
        "search_overhead", "search_overhead.py", "what Ray, Optuna and MLflow cost per trial of a search",
        runs=(_r("--out", f"{RESULTS}/search_overhead.md", writes=("search_overhead.md",)),),
        quick=("--spaces", "{quick}/space.yaml", "--no-search", "--out", "{out}/search_overhead.md"),
        quick_writes=("search_overhead.md",), measures=(*SEARCH, BUILTIN, SMOKE, FAST)),
    Experiment(
        "process_exit", "process_exit.py", "the autospeed command's fast exit against Python's teardown",
        runs=(_r("--repeats", "3", "--out", f"{RESULTS}/process_exit.md", writes=("process_exit.md",)),),
        quick=("--repeats", "1", "--no-search", "--out", "{out}/process_exit.md"),
        quick_writes=("process_exit.md",), measures=(*PACKAGE, SMOKE)),
    Experiment(
        "startup", "startup.py", "`autospeed train`'s wall to target against its TTA, beside `import torch` "
        "(after speedup: its speedup_best.yaml)",
        runs=(_r("--repeats", "5", "--out", f"{RESULTS}/startup.md", writes=("startup.md",)),),
        quick=("--recipe", "{quick}/recipe.yaml", "--repeats", "1", "--no-warm-up", "--out", "{out}/startup.md"),
        quick_writes=("startup.md",), measures=(*PACKAGE, SPEEDUP_BEST)),
    Experiment(
        "trainer_overhead", "trainer_overhead.py", "autospeed's trainer against a hand-written loop",
        runs=(_r("--out", f"{RESULTS}/trainer_overhead.md", writes=("trainer_overhead.md",)),),
        quick=("--num-samples", "2000", "--batch-sizes", "64", "--steps", "10", "--repeats", "1",
               "--out", "{out}/trainer_overhead.md"),
        quick_writes=("trainer_overhead.md",), measures=(*TRAIN, BUILTIN)),
    Experiment(
        "own_script", "own_script.py", "a user's own training script (examples/own_script): autospeed's recipe "
        "against the script as written, by wall to target, and the knob context's cost per step",
        runs=(_r(writes=("own_script.md", "own_script_best.yaml")),),
        # a few steps of each loop only: part (a) starts 3 processes of torch and the script (about 10 s), and the
        # test suite runs a script search of its own (tests/script/test_script_search.py)
        quick=("--part", "overhead", "--steps", "5", "--warmup-steps", "1", "--overhead-repeats", "2",
               "--samples", "640", "--out", "{out}/own_script.md"),
        quick_writes=("own_script.md",), measures=(*SEARCH, "autospeed/script/", "examples/own_script/")),
    Experiment(
        "public_scripts", "public_scripts.py", "public training scripts no one here wrote (pytorch/examples mnist and "
        "word_language_model, karpathy/nanoGPT) converted to the knob context: changed lines, bit-identical run "
        "alone, a CPU search, its export and `autospeed train` of the winner",
        runs=(_r(*(f"/tmp/public_scripts/{n}" for n in ("mnist", "word_language_model", "nanogpt")),
                 writes=("public_scripts.md",)),),
        # no quick pass: it starts Ray (3 searches, about 6 minutes on 2 cores); the suite converts a GradScaler
        # loop of its own (tests/script/test_script_ways.py)
        note="needs the scratch folders (original/, prepared/, converted/ of each script, fetched and converted "
             "outside the repository, as experiments/public_scripts.py describes); about 6 minutes on 2 cores",
        measures=(*SEARCH, "autospeed/script/")),
    Experiment(
        "script_long_job", "script_long_job.py", "a long job through a public script (issue 43): nanoGPT's train.py "
        "as public_scripts.py converts it, its baseline measured, searched with the exploration capped at 2 baseline "
        "runs and confirmation `runs: fewest`, its export against the baseline in fresh `autospeed train` processes",
        runs=(_r("/tmp/public_scripts/nanogpt", writes=("script_long_job.md",)),),
        # no quick pass: it starts Ray and trains the baseline to its target a dozen times (minutes on 2 cores)
        note="needs public_scripts.py's nanogpt scratch folder (its converted/)",
        measures=(*SEARCH, *TIMING, "autospeed/script/")),
    Experiment(
        "kill_anywhere", "kill_anywhere.py", "searches SIGKILLed at 50+ random moments (in confirmation and the "
        "ablation too, counted apart), each resumed: every finished trial, confirmation and ablation run kept once, "
        "and the ledger, MLflow and Optuna agree",
        runs=(_r(writes=("kill_anywhere.md",)),),
        # no quick pass: every run of it starts Ray (its --quick, 2 searches x 2 kills, takes about 2 minutes),
        # and the suite kills a search at seeded points of its own (tests/reliability/test_kill_anywhere.py)
        note="about 30 minutes on 2 cores", measures=SEARCH),  # its space file is its own (written by the script)
    Experiment(
        "knobs", "knobs.py", "throughput of each speed knob against fp32 eager (mnist1d, lm), CPU",
        runs=(_r("--rounds", "5", "--steps", "200", "--out", f"{RESULTS}/knobs_cpu.md", writes=("knobs_cpu.md",),
                 measures=(BUILTIN,)),
              _r("--workload", "lm", "--rounds", "3", "--out", f"{RESULTS}/knobs_lm_cpu.md",
                 writes=("knobs_lm_cpu.md",), measures=(LM_DATA,))),
        # compile's cold compile alone takes 9 s; every other knob runs
        quick=("--num-samples", "2000", "--steps", "3", "--rounds", "1", "--skip", "compile",
               "--out", "{out}/knobs_cpu.md"),
        quick_writes=("knobs_cpu.md",), measures=TRAIN),
    Experiment(
        "scaling", "scaling.py", "data-parallel scaling, 1 vs 2 gloo workers, CPU",
        runs=(_r("--repeats", "5", "--out", f"{RESULTS}/scaling_cpu.md", writes=("scaling_cpu.md",)),),
        # one worker only: the N-worker runs start Ray Train
        quick=("--workload-options", '{"num_samples": 2000}', "--workers", "1", "--repeats", "1", "--epochs", "10",
               "--max-train-seconds", "10", "--target-accuracy", "0.4", "--out", "{out}/scaling_cpu.md"),
        quick_writes=("scaling_cpu.md",),
        measures=(*TRAIN, BUILTIN, "autospeed/_ray.py", "autospeed/parallel/")),
    Experiment(
        "search_efficiency", "search_efficiency.py",
        "compute each search strategy needs to find a near-best recipe (maths space; systems space, 12 and 24 "
        "trials, on one ground truth)",
        runs=(_r("--seeds", "3", "--trials", "40", "--truth-repeats", "2", "--out", f"{RESULTS}/search_efficiency.md",
                 writes=("search_efficiency.md", "search_efficiency.png", "search_efficiency.json")),
              _r("--space", "systems", "--seeds", "10", "--trials", "12", "--truth-repeats", "1",
                 "--out", f"{RESULTS}/search_efficiency_systems.md",
                 writes=("search_efficiency_systems.md", "search_efficiency_systems.png",
                         "search_efficiency_systems.json")),
              # The script writes a .json beside this one too; the run at 887d9e7 did not keep it. Its next run
              # does: declare search_efficiency_systems_24trials.json here when it is committed.
              _r("--space", "systems", "--seeds", "10", "--trials", "24", "--truth-repeats", "1", "--work",
                 "/tmp/eff24", "--truth-cache", "/tmp/autospeed-efficiency-systems/truth.json",
                 "--out", f"{RESULTS}/search_efficiency_systems_24trials.md",
                 writes=("search_efficiency_systems_24trials.md", "search_efficiency_systems_24trials.png"))),
        # the committed measurements, redrawn: its searches are Ray searches
        quick=("--report-only", "--saved", f"{RESULTS}/search_efficiency.json", "--simulated-searches", "200",
               "--work", "{out}/efficiency-work", "--out", "{out}/search_efficiency.md"),
        quick_writes=("search_efficiency.md", "search_efficiency.png"), measures=(*SEARCH, BUILTIN)),
    Experiment(
        "sampler_simulation", "sampler_simulation.py",
        "the samplers replayed over search_efficiency's ground truth (after search_efficiency: its .json)",
        runs=(_r("--seeds", "60", "--trials", "40", "--out", f"{RESULTS}/sampler_simulation.md",
                 writes=("sampler_simulation.md",)),),
        quick=("--seeds", "1", "--trials", "5", "--out", "{out}/sampler_simulation.md"),
        quick_writes=("sampler_simulation.md",),
        # it builds the samplers itself, as search/tuner.py does: the script is their code here
        measures=("autospeed/space.py", "autospeed/space_sections.py", f"{RESULTS}/search_efficiency.json")),
    Experiment(
        "interval_coverage", "interval_coverage.py",
        "coverage of the speed-up interval by simulation (skewed TTAs at noise.md's spread, misses, adaptive "
        "repeats; after noise: its CV)",
        runs=(_r("--experiments", "4000", "--out", f"{RESULTS}/interval_coverage.md",
                 writes=("interval_coverage.md",)),),
        quick=("--quick", "--out", "{out}/interval_coverage.md"),
        quick_writes=("interval_coverage.md",), measures=("autospeed/outcome.py", f"{RESULTS}/noise.md")),
    Experiment(
        "payback", "payback.py", "does a search pay for itself? every variant's search, one table",
        runs=(_r(writes=("payback.md",)),),
        quick=("--variant", "quick:{quick}/space.yaml", "--exported", "quick={quick}/recipe.yaml", "--repeats", "1",
               "--baseline-seconds", "0", "--baseline-epochs", "0", "--work", "{out}/payback-work",
               "--out", "{out}/payback.md"),
        quick_writes=("payback.md",), measures=(*SEARCH, *TIMING, FAST, BUILTIN, LM, LM_DATA)),
    Experiment(
        "peer", "peer.py", "autospeed against the usual HPO set-up (Optuna TPE + MedianPruner), by TTA",
        runs=(_r(writes=("peer.md",)),),
        quick=("--space", "{quick}/space.yaml", "--trials", "1", "--epochs", "5", "--autospeed-recipe",
               "{quick}/recipe.yaml", "--repeats", "1", "--peer-seconds", "10", "--work", "{out}/peer-work",
               "--out", "{out}/peer.md"),
        quick_writes=("peer.md",), measures=(*SEARCH, *TIMING, FAST, BUILTIN)),
    Experiment(
        "probe_stability", "probe_stability.py",
        "the probe's pick in 3 runs on one machine (fast.yaml), each in a fresh process: timings, margin, pick",
        runs=(_r("--out", f"{RESULTS}/probe_stability.md", writes=("probe_stability.md",)),),
        # the probe stage in-process (no Ray), on the quick space with two systems values and two optimizers
        quick=("--space", "{quick}/space.yaml", "--runs", "1", "--threads", "1", "--set", "probe.enabled=true",
               "--set", "probe.warmup_steps=1", "--set", "probe.steps=3", "--set", "probe.rounds=2",
               "--set", "space.optimizer={choice: [sgd, adamw]}",
               "--set", "space.optimizer_impl={choice: [default, foreach]}", "--work", "{out}/probe-stability-work",
               "--out", "{out}/probe_stability.md"),
        quick_writes=("probe_stability.md",),
        measures=(*TRAIN, BUILTIN, "autospeed/search/probe.py", "autospeed/search/probe_decide.py",
                  "autospeed/space.py", "autospeed/space_sections.py", FAST)),
    Experiment(
        "neutrality", "neutrality.py",
        "E1 (issue 43): the maths-neutrality check on systems variants and maths-changing controls (10 reps), and "
        "each variant's TTA predicted from the probe's throughput against 3 full runs (digits, CPU)",
        runs=(_r("--exclusive", "--out", f"{RESULTS}/neutrality.md", writes=("neutrality.md",)),
              _r("--device", "cuda", "--exclusive", "--out", f"{RESULTS}/gpu/neutrality_h200.md",
                 writes=("gpu/neutrality_h200.md", "gpu/quick_h200_2/neutrality_h200.log"), at="e702594",
                 note="on an H200, in the device call after gpu_quick's; its output kept as "
                      "gpu/quick_h200_2/neutrality_h200.log")),
        quick=("--reps", "1", "--steps", "40", "--rounds", "2", "--probe-warmup-steps", "1", "--probe-steps", "3",
               "--seeds", "1", "--target", "0.8", "--variants", "optimizer_impl=foreach", "--threads", "1",
               "--out", "{out}/neutrality.md"),
        quick_writes=("neutrality.md",),
        measures=(*TRAIN, BUILTIN, "autospeed/search/neutrality.py", "autospeed/search/probe.py",
                  "autospeed/search/probe_decide.py")),
    Experiment(
        "long_job", "long_job.py",
        "long jobs (long.yaml): how well a predicted TTA ranks recipes (a), and a predicting search's payback (b)",
        # the curves the predictor was tuned on (seed 0), then the held-out ones (seed 1), each scored the same way
        runs=(_r("--part", "curves", "--seed", "0", "--curves", f"{RESULTS}/long_job_curves_tuning.json",
                 writes=("long_job_curves_tuning.json",)),
              _r("--part", "curves", writes=("long_job_curves.json",)),
              _r("--part", "quality", writes=("long_job.md",), measures=(f"{RESULTS}/long_job_curves.json",)),
              _r("--part", "quality", "--curves", f"{RESULTS}/long_job_curves_tuning.json",
                 "--out", f"{RESULTS}/long_job_tuning.md", writes=("long_job_tuning.md",),
                 measures=(f"{RESULTS}/long_job_curves_tuning.json",)),
              _r("--part", "payback", writes=("long_job_payback.md",), measures=(*SEARCH, *TIMING)),
              _r("--part", "payback", "--cap", "2", "--out", f"{RESULTS}/long_job_payback_capped.md",
                 writes=("long_job_payback_capped.md",), measures=(*SEARCH, *TIMING))),
        # the committed curves, predicted again: recording them trains 26 recipes to the target, (b) runs searches
        quick=("--part", "quality", "--curves", f"{RESULTS}/long_job_curves.json", "--out", "{out}/long_job.md"),
        quick_writes=("long_job.md",),
        # (a)'s figures rest on curves the trainer recorded, so the trainer counts for every part
        measures=(*TRAIN, BUILTIN, "autospeed/space.py", "autospeed/space_sections.py", "autospeed/predict.py",
                  "autospeed/search/curve.py", "autospeed/outcome.py", LONG)),
    Experiment(
        "long_job_ranking", "long_job_ranking.py",
        "long jobs: decision metrics of three rankings of trials cut at the budget (the previous predictor, the "
        "metric at the cut, autospeed/horizon.py) over simulated 12-trial searches on the committed curves",
        runs=(_r(writes=("long_job_ranking.md",), measures=(f"{RESULTS}/long_job_curves.json",
                                                           f"{RESULTS}/long_job_curves_tuning.json")),),
        quick=("--searches", "20", "--out", "{out}/long_job_ranking.md"), quick_writes=("long_job_ranking.md",),
        measures=("autospeed/horizon.py", "autospeed/predict.py", "autospeed/outcome.py")),
    Experiment(
        "long_job_bench", "long_job_bench.py",
        "long jobs, measured truth (long_bench.yaml, 3 seeds, samples to target): decision metrics of four rankings "
        "of trials cut at 20x and 50x horizon ratios, of successive halving, ASHA and an LR trend at the same "
        "exploration compute, and of halving whose first rung is the flat cut (exploration in baseline runs), over "
        "simulated 12-trial searches; and how well the halving winner's samples to target are predicted",
        # the curves are the trainer's (with its cooldown branch); the analysis reads them (their header names
        # their commit) and ranks with horizon.py and predict.py, training nothing
        runs=(_r("--part", "curves", writes=("long_job_bench_curves.json",),
                 measures=(*TRAIN, BUILTIN, "search_spaces/long_bench.yaml", "experiments/long_job.py")),
              _r("--part", "analysis", writes=("long_job_bench.md",),
                 measures=(f"{RESULTS}/long_job_bench_curves.json", "experiments/long_job_ranking.py",
                           "experiments/_long_job_arms.py", "experiments/_long_job_report.py",
                           "experiments/_long_job_predict.py", "experiments/_long_job_plateau.py"))),
        # a tiny real run of both parts: 3 recipes, 2 seeds, 3 epochs of 3,200 samples, targets a few reach
        quick=("--part", "all", "--recipes", "3", "--seeds", "2", "--epochs", "3", "--num-samples", "4000",
               "--targets", "0.3", "0.25", "--stop", "0.3", "--searches", "20",
               "--curves", "{out}/long_job_bench_curves.json", "--out", "{out}/long_job_bench.md"),
        quick_writes=("long_job_bench.md", "long_job_bench_curves.json"),
        measures=("autospeed/space.py", "autospeed/space_sections.py", "autospeed/horizon.py", "autospeed/predict.py",
                  "autospeed/outcome.py")),
    Experiment(
        "example", "example.py", "the README's examples as a user runs them: the 30-second smoke search, the main "
        "job (fast.yaml) and a long job, each in a new folder with an empty dataset cache",
        runs=(_r("--out", f"{RESULTS}/example_smoke.md", writes=("example_smoke.md",), measures=(SMOKE,)),
              _r("--space", FAST, "--out", f"{RESULTS}/example_fast.md", writes=("example_fast.md",),
                 measures=(FAST,)),
              _r("--space", LONG, "--out", f"{RESULTS}/example_long.md", writes=("example_long.md",),
                 measures=(LONG,))),
        note="no quick pass: it is one whole search (Ray's start alone is most of its time)",
        measures=(*SEARCH, BUILTIN, "autospeed/show/live.py")),  # live.py: the output the results file shows
    Experiment(
        "suite_durations", "suite_durations.py", "the README's test command timed on a fresh clone, with pytest's "
        "slowest files and phases, 3 runs in a row",
        runs=(_r("--fresh-clone", "--out", f"{RESULTS}/suite_durations.md", writes=("suite_durations.md",)),),
        note="no quick pass: it runs the whole test suite, which itself runs the quick pass",
        unmeasured="it times the whole suite: every test and all the code under them, so any commit can move it; "
                   "it is re-measured when the suite's time is in question (README's Tests), not by path"),
    Experiment(
        "gpu_checks", "gpu_checks.sh",
        "the checks on a CUDA GPU (pytest -m cuda, each GPU space's calibration, a DDP trial, knobs, gpu.yaml's and "
        "gpu_lm.yaml's search, speed-up and compile-cache cold start), in stages that fit the device's 10-minute "
        "calls (its header); an offline GPU machine carries Ray, Optuna and MLflow as wheels (gpu_wheels). Its "
        "runs below are archived: the two H100 sessions' files, written by the script of their time; today's "
        "stages have not run on a GPU yet",
        runs=(_r("tests", f"{RESULTS}/gpu", writes=("gpu/baseline_probe.log",), at="d896f4d",
                 note="the first H100 session; its pytest_cuda.log was replaced by the second's, its versions.txt "
                      "and its 6-trial plumbing search were not kept"),
              _r("knobs", f"{RESULTS}/gpu", writes=("gpu/knobs_gpu_partial.log",), at="d896f4d",
                 note="the stage's knobs.log, kept as knobs_gpu_partial.log: it stopped in max-autotune's 422 s "
                      "cold compile, before knobs_gpu.md"),
              _r("tests", f"{RESULTS}/gpu", writes=("gpu/pytest_cuda.log",), at="52a0aaa",
                 note="the second H100 session, on the tree of 6c09806 as experiments/results/gpu/README.md says"),
              _r("trials", f"{RESULTS}/gpu/search20", "20", "3",
                 writes=tuple(f"gpu/search20/{f}" for f in (
                     "best.yaml", "search_export_train_report.log", "speedup_gpu.md", "versions.txt",
                     *(f"report/{r}" for r in ("report.html", "confirm.png", "curves.png", "importance.png",
                                               "tradeoff.png", "tta.png")))),
                 at="52a0aaa", note="its search.log kept as search_export_train_report.log, report.tgz unpacked "
                                    "into report/"),
              _r("knobs", f"{RESULTS}/gpu", writes=("gpu/knobs_gpu_partial2.log",), at="52a0aaa",
                 note="with KNOBS_SKIP=max-autotune; the stage's knobs.log, kept as knobs_gpu_partial2.log: it "
                      "stopped at compiled bf16's NaN (fixed in 6c09806), before knobs_gpu.md"),
              _r("lmknobs", f"{RESULTS}/gpu", writes=("gpu/knobs_lm_gpu.md",), at="52a0aaa",
                 note="with KNOBS_ROUNDS=2")),
        gpu=True, note="no quick pass: it is a GPU session's whole battery"),
    Experiment(
        "gpu_quick", "gpu_quick.py",
        "the GPU checks in one prepared call of the device's 15 minutes (issue 44): pytest -m cuda, gpu.yaml's "
        "baseline calibrated off its measured curve, a short search against it with the winner confirmed in 3 fresh "
        "processes, the GPT's tokens/s and MFU, the winner's cold start with and without the compile cache; as much "
        "as fits, each stage capped (gpu_checks.sh quick runs it on the device machine)",
        runs=(_r("--out", f"{RESULTS}/gpu/quick", "--seconds", "545",
                 writes=tuple(f"gpu/quick/{f}" for f in (
                     "gpu_quick.md", "pytest_cuda.log", "calibrate_vision.md", "search_vision.md",
                     "gpu_quick_best.yaml", "logs.tgz"))),
              _r("--out", f"{RESULTS}/gpu/quick", "--seconds", "270", "--stages", "gpt", "cache", "--summary",
                 "gpu_quick_2.md", writes=tuple(f"gpu/quick/{f}" for f in ("gpu_quick_2.md", "mfu_gpt.md",
                                                                            "logs_2.tgz")),
                 note="a second call on the same warm machine, with what was left of the session's device time; "
                      "its logs.tgz is kept as logs_2.tgz (the name the script gives it since)"),
              _r("--out", f"{RESULTS}/gpu/quick_h200", "--seconds", "515", "--work", "/tmp/gq", "--stages", "tests",
                 "calibrate", "search",
                 writes=tuple(f"gpu/quick_h200/{f}" for f in (
                     "gpu_quick.md", "pytest_cuda.log", "calibrate_vision.md", "search_vision.md",
                     "gpu_quick_best.yaml", "logs.tgz")),
                 note="an H200; the vision stages on 200,000 generated images"),
              _r("--out", f"{RESULTS}/gpu/quick_h200", "--seconds", "320", "--work", "/tmp/gq", "--stages", "gpt",
                 "cache", "--summary", "gpu_quick_2.md",
                 writes=tuple(f"gpu/quick_h200/{f}" for f in ("gpu_quick_2.md", "mfu_gpt.md", "cold_start_cache_gpu.md",
                                                               "logs_2.tgz")),
                 note="the same warm H200 right after, with what was left of the session's device time"),
              _r("--out", f"{RESULTS}/gpu/quick_h200_2", "--seconds", "515", "--work", "/tmp/gq", "--stages",
                 "tests", "calibrate", "search",
                 writes=tuple(f"gpu/quick_h200_2/{f}" for f in (
                     "gpu_quick.md", "pytest_cuda.log", "calibrate_vision.md", "logs.tgz", "work.tgz")),
                 at="e702594",
                 note="an H200 once more; the search ended but the stage's cap cut its report (the export process "
                      "after it), so search_vision.md comes from the next run; the call's /tmp/gq came back as "
                      "work.tgz"),
              _r("--reread", "--work", "/tmp/gq", "--out", f"{RESULTS}/gpu/quick_h200_2",
                 writes=tuple(f"gpu/quick_h200_2/{f}" for f in ("search_vision.md", "gpu_quick_best.yaml")),
                 note="here, on the call's work folder unpacked from quick_h200_2/work.tgz into /tmp/gq: no "
                      "measurement, the report of the search that ran in the call")),
        gpu=True, note="no quick pass: it is a GPU session's whole call (rehearse it with --device cpu)",
        measures=(*SEARCH, "autospeed/workloads/", "search_spaces/gpu.yaml", "search_spaces/gpu_lm.yaml",
                  "tests/train/test_cuda.py", "experiments/compile_cache.py")),
    Experiment(
        "cold_start", "cold_start.py", "cold-process vs warm-process TTA of one recipe on CUDA (the export of "
        "gpu_checks' 20-trial search)",
        runs=(_r("--config", f"{RESULTS}/gpu/search20/best.yaml", "--repeats", "4",
                 "--out", f"{RESULTS}/gpu/cold_start_gpu.md", writes=("gpu/cold_start_gpu.md",), at="52a0aaa",
                 note="the second H100 session, on the tree of 6c09806"),),
        quick=("--config", "{quick}/recipe.yaml", "--repeats", "2", "--out", "{out}/cold_start.md"),
        quick_writes=("cold_start.md",), gpu=True, measures=(*TRAIN, BUILTIN)),
    Experiment(
        "compile_cache", "compile_cache.py", "a compiled recipe's `autospeed train` in fresh processes on a new "
        "machine (empty inductor cache), with and without the compile cache exported beside it: first step and TTA",
        runs=(_r("--runs", "5", "--out", f"{RESULTS}/cold_start_cache_cpu.md", writes=("cold_start_cache_cpu.md",)),),
        note="no quick pass: every run compiles (10-20 s on 2 cores); tests/train/test_compile_cache.py round-trips "
             "the cache",
        measures=(*TRAIN, BUILTIN, "autospeed/cli.py", SPEEDUP_BEST)),
    Experiment(
        "compile_costs", "compile_costs.py", "a small search whose winner compiles, exported: the three compile costs "
        "its export prints (new machine, shipped cache, warm) against `autospeed train` of it each way",
        runs=(_r("--runs", "3", "--exclusive", "--out", f"{RESULTS}/compile_costs_cpu.md",
                 writes=("compile_costs_cpu.md",)),),
        quick=("--best", "{quick}/recipe.yaml", "--runs", "1", "--out", "{out}/compile_costs.md"),
        quick_writes=("compile_costs.md",),
        note="its quick pass re-measures the quick recipe, which does not compile, without a search",
        measures=(*SEARCH, BUILTIN, "experiments/compile_cache.py")),
    Experiment(
        "session_drift", "session_drift.py", "a compiled recipe's fresh `autospeed train` processes in sessions a "
        "minute apart: how far its seconds drift between sessions beyond the spread inside one (the between-session "
        "term of the export's next-run intervals, outcome.SESSION_LOG_SD)",
        runs=(_r("--sessions", "8", "--runs", "2", "--pause-seconds", "60", "--out", f"{RESULTS}/session_drift.md",
                 writes=("session_drift.md",)),),
        note="no quick pass: every run compiles (about 10 s on 2 cores) and its sessions are a minute apart",
        measures=(*TRAIN, BUILTIN, "autospeed/cli.py", "experiments/compile_cache.py")),
    Experiment(
        "gpu_wheels", "gpu_wheels.sh", "fills .whl/ with the wheels gpu_checks.sh installs on an offline GPU "
        "machine (needs the network)", helper=True),
)


def find(name: str) -> Experiment | None:
    """The experiment named `name` (its script's name, with or without .py/.sh)."""
    stem = name.removeprefix("experiments/").removesuffix(".py").removesuffix(".sh")
    return next((e for e in EXPERIMENTS if e.name == stem), None)
