#!/usr/bin/env bash
# autospeed's checks on one CUDA GPU (issues 14 and 29), run from the repository root of a machine with
# no network. Ray, Optuna and MLflow travel as wheels in .whl/ (`bash experiments/gpu_wheels.sh` fills it).
# Every stage writes its results and logs under OUTDIR, each file starting with a header (commit, machine,
# command, date); copy OUTDIR to experiments/results/gpu/ afterwards.
#
#   AUTOSPEED_COMMIT=$(git rev-parse --short HEAD) bash experiments/gpu_checks.sh OUTDIR STAGE [STAGE ...]
#
# The one-call version (issue 44: 15 device minutes a session, start-up included):
#   AUTOSPEED_COMMIT=$(git rev-parse --short HEAD) bash experiments/gpu_checks.sh OUTDIR quick
# runs experiments/gpu_quick.py for QUICK_SECONDS (default 550): the cuda tests, the vision baseline's calibration,
# a short search with fresh-process confirmation, the GPT's MFU and the compile cache's cold start, as much as fits.
#
# Stages, in the order `all` runs them (minutes on an H100 are estimates until a run measures them):
#   tests           pytest -m cuda (tests/train/test_cuda.py)                                      ~2
#   calibrate       each GPU space's baseline once, its target metric against the train clock,
#                   so gpu.yaml/gpu_lm.yaml's targets can be set where the baseline needs 60-90 s   ~5
#   ddp             a 1-GPU DDP trial: the vision baseline on one Ray Train worker (NCCL group of 1) ~2
#   knobs           experiments/knobs.py on both GPU workloads (resnet, gpt): each knob's ratio     ~8
#   vision          gpu.yaml: search (confirmation included), export, train, report                ~10
#   vision_speedup  speedup.py on its export: >= 5 fresh processes a side                          ~9
#   vision_cache    compile_cache.py on its export: cold start with and without the shipped cache   ~5
#   lm, lm_speedup, lm_cache: the same for gpu_lm.yaml (tokens/s and MFU in every run)             ~10, 9, 6
#   all             every stage above, in that order
# A later call finds an earlier call's export in experiments/results/gpu/<name>_best.yaml (BEST_FROM), so
# copy OUTDIR there between calls. The device allows 10 minutes a call and 30 a session, so the whole
# set takes two sessions, e.g. (1) tests calibrate ddp | vision | vision_speedup, (2) lm | lm_speedup |
# vision_cache lm_cache, and knobs when time is left.
# STAGE_SECONDS (default 560): the time limit of each timed command.
set -uo pipefail
out=${1:?usage: gpu_checks.sh OUTDIR STAGE [STAGE ...]}
shift
stages="quick tests calibrate ddp knobs vision vision_speedup vision_cache lm lm_speedup lm_cache"
[ $# -gt 0 ] || { echo "name at least one stage: $stages all" >&2; exit 2; }
mkdir -p "$out"
if [ ! -d .site/databricks ] && ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl 2>&1 | grep -v WARNING | tail -3
    [ -f .whl/ray-site.tar.xz ] && python3 -c "import tarfile; tarfile.open('.whl/ray-site.tar.xz').extractall('.site')"
fi
export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0
export AUTOSPEED_COMMIT=${AUTOSPEED_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
py=python3
limit=${STAGE_SECONDS:-560}
device=${GPU_CHECKS_DEVICE:-cuda}   # cpu: the CPU smoke of this script (tests/experiments), tiny sizes
work=${GPU_CHECKS_WORK:-/tmp/gpu-checks}
mkdir -p "$work"

header() {  # the first lines of a log: what ran, on which commit and machine, when
    echo "command: $*"
    echo "commit: $AUTOSPEED_COMMIT"
    echo "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
        || echo no GPU), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "date: $(date -Is)"
    echo
}

space_file() {  # the search space of a stage; GPU_CHECKS_SPACES_DIR points the CPU smoke at tiny copies
    echo "${GPU_CHECKS_SPACES_DIR:-search_spaces}/$1"
}

versions() {
    { header versions; nvidia-smi; $py -c "import torch, ray, optuna, mlflow, sentencepiece
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU', '| ray', ray.__version__,
      '| optuna', optuna.__version__, '| mlflow', mlflow.__version__, '| sentencepiece', sentencepiece.__version__)"
    } > "$out/versions.txt" 2>&1
}

stage_tests() {
    { header pytest -q -n 0 -m cuda tests/train/test_cuda.py
      timeout "$limit" $py -m pytest -q -n 0 -m cuda tests/train/test_cuda.py -p no:cacheprovider -rA --durations=0
      echo "pytest exit $?"; } > "$out/pytest_cuda.log" 2>&1
}

stage_calibrate() {  # each baseline as the space defines it, evaluated often: where to put the target
    for space in gpu.yaml gpu_lm.yaml; do
        { header "calibrate $(space_file $space)"
          timeout "$limit" $py - "$(space_file $space)" "$device" <<'PY'
import sys
from autospeed.space import load_spec
from autospeed.train.trainer import train
spec = load_spec(sys.argv[1])
base = spec.recipe_for({}, baseline=True)
recipe = base.model_copy(update={"device": sys.argv[2], "eval_every_epochs": base.eval_every_epochs / 2})
target = recipe.resolved_target
print(f"{sys.argv[1]}: baseline to {target.metric} {target.value} ({target.mode}); budget {recipe.max_train_seconds} s")
r = train(recipe, on_eval=lambda e: print(
    f"train {e.train_seconds:7.1f} s  epoch {e.epoch:5.2f}  {target.metric} {e.value:.4f}  "
    f"{e.samples_per_second:,.0f} samples/s" + (f"  {e.tokens_per_second:,.0f} tokens/s" if e.tokens_per_second else "")
    + (f"  MFU {e.mfu:.1%}" if e.mfu is not None else ""), flush=True))
print("result", r.status.value, "tta", r.tta_seconds, "best", r.best_value, "train_s", round(r.train_seconds, 1),
      "first_step_s", round(r.first_step_seconds, 2), "peak MB", r.peak_memory_mb, "applied", r.applied)
PY
          echo "calibrate exit $?"; } > "$out/calibrate_${space%.yaml}.log" 2>&1
    done
}

stage_ddp() {  # one Ray Train worker with its NCCL process group of one: the trainer's DDP path on a GPU
    { header "ddp: gpu.yaml's baseline, 1 worker under DDP through Ray Train"
      timeout "$limit" $py - "$(space_file gpu.yaml)" "$device" <<'PY'
import sys, tempfile
import ray
from autospeed.search import _ray, data_parallel
from autospeed.space import load_spec
spec = load_spec(sys.argv[1])
recipe = spec.recipe_for({}, baseline=True).model_copy(update={"device": sys.argv[2], "epochs": 2})
_ray.start_ray(None, verbose=False)
gpus = sys.argv[2] == "cuda"
cpus = min(8, int(ray.cluster_resources()["CPU"]))  # the worker's cores (and the driver's share)
result = data_parallel.fit(data_parallel._recipe_worker,
                           {"recipe": recipe.model_dump_json(), "threads": data_parallel.worker_threads(1, cpus)},
                           workers=1, cpus=cpus, gpus=gpus, storage_path=tempfile.mkdtemp(), name="ddp1").return_value
print("backend", "nccl" if gpus else "gloo", "status", result.status.value, "workers", result.applied["workers"],
      "ddp", result.applied.get("ddp"), "samples/s", round(result.samples_per_second), "best", result.best_value,
      "error", result.error)
ray.shutdown()
PY
      echo "ddp exit $?"; } > "$out/ddp.log" 2>&1
}

stage_knobs() {
    for wl in resnet gpt; do
        local options=KNOBS_${wl^^}_OPTIONS  # JSON workload options (the CPU smoke's tiny sizes); default: GPU sizes
        { header "knobs $wl"
          timeout "$limit" $py experiments/knobs.py --device "$device" --workload $wl \
              ${!options:+--workload-options "${!options}"} \
              --rounds ${KNOBS_ROUNDS:-2} --steps ${KNOBS_STEPS:-50} --skip ${KNOBS_SKIP:-max-autotune} \
              --out "$out/knobs_${wl}_gpu.md"
          echo "knobs exit $?"; } > "$out/knobs_$wl.log" 2>&1
    done
}

search_stage() {  # $1: space file, $2: name; the search (confirmation included), export, train, report
    local space name=$2 dir=$work/$2
    space=$(space_file "$1")
    rm -rf "$dir"; mkdir -p "$dir"
    local uri=sqlite:///$dir/mlflow.db
    { header "search $space"
      timeout -s INT -k 30 "$limit" $py -m autospeed search --space "$space" --tracking-uri "$uri" \
          --storage-path "$dir/runs" --name "$name"
      echo "search exit $?"
      $py -m autospeed export --name "$name" --tracking-uri "$uri" --out "$dir/best.yaml"; echo "export exit $?"
      $py -m autospeed train --config "$dir/best.yaml" --no-track; echo "train exit $?"
      $py -m autospeed report --name "$name" --tracking-uri "$uri" --storage-path "$dir/runs" --out "$dir/report"
      echo "report exit $?"; } > "$out/search_$name.log" 2>&1
    cp "$dir/best.yaml" "$out/${name}_best.yaml" 2>/dev/null
    tar -C "$dir" -czf "$out/${name}_report.tgz" report 2>/dev/null
}

best_of() {  # the export a search stage wrote, here or (a later call on a fresh machine) in OUTDIR's copy
    local name=$1
    if [ -f "$work/$name/best.yaml" ]; then echo "$work/$name/best.yaml"
    elif [ -f "${BEST_FROM:-experiments/results/gpu}/${name}_best.yaml" ]; then
        echo "${BEST_FROM:-experiments/results/gpu}/${name}_best.yaml"
    else echo "no export of $name: run its search stage first" >&2; return 1; fi
}

speedup_stage() {  # $1: space file, $2: name; the export against the baseline, fresh processes, 5+ a side
    local best space
    best=$(best_of "$2") || return 0
    space=$(space_file "$1")
    { header "speedup $space $best"
      timeout "$limit" $py experiments/speedup.py --space "$space" --best "$best" \
          --repeats ${REPEATS:-5} --goal 5 --work "$work/speedup-$2" --out "$out/speedup_$2.md"
      echo "speedup exit $?"; } > "$out/speedup_$2.log" 2>&1
}

cache_stage() {  # $1: name; the export's first step and TTA on a new machine, with and without its compile cache
    local best
    best=$(best_of "$1") || return 0
    { header "cold start with and without the shipped compile cache: $best"
      timeout "$limit" $py experiments/compile_cache.py --device "$device" --config "$best" \
          --runs ${REPEATS:-5} --work "$work/cache-$1" --out "$out/cold_start_cache_$1.md"
      echo "cold start exit $?"; } > "$out/cold_start_cache_$1.log" 2>&1
}

[ "$*" = quick ] || versions  # quick writes its versions into its logs: at most 8 files come back
for stage in "$@"; do
    case "$stage" in
    quick) $py experiments/gpu_quick.py --out "$out" --device "$device" --seconds "${QUICK_SECONDS:-550}" \
               --work "$work/quick" ;;
    all) stage_tests; stage_calibrate; stage_ddp; stage_knobs
         search_stage gpu.yaml gpu; speedup_stage gpu.yaml gpu; cache_stage gpu
         search_stage gpu_lm.yaml gpu_lm; speedup_stage gpu_lm.yaml gpu_lm; cache_stage gpu_lm ;;
    tests) stage_tests ;;
    calibrate) stage_calibrate ;;
    ddp) stage_ddp ;;
    knobs) stage_knobs ;;
    vision) search_stage gpu.yaml gpu ;;
    vision_speedup) speedup_stage gpu.yaml gpu ;;
    vision_cache) cache_stage gpu ;;
    lm) search_stage gpu_lm.yaml gpu_lm ;;
    lm_speedup) speedup_stage gpu_lm.yaml gpu_lm ;;
    lm_cache) cache_stage gpu_lm ;;
    *) echo "unknown stage '$stage'; use: $stages all" >&2; exit 2 ;;
    esac
done
ls -la "$out"
