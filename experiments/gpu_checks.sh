#!/usr/bin/env bash
# autospeed's checks on a CUDA GPU (issue 14), run from the repository root of a machine
# with one GPU and no network. Ray, Optuna and MLflow travel as wheels in .whl/
# (`bash experiments/gpu_wheels.sh` fills it); each stage writes under OUTDIR.
#
#   bash experiments/gpu_checks.sh all    OUTDIR [TRIALS] [REPEATS]  # tests, search, speedup
#   bash experiments/gpu_checks.sh tests  OUTDIR   # pytest -m cuda, gpu.yaml's baseline timed
#   bash experiments/gpu_checks.sh knobs  OUTDIR   # experiments/knobs.py on the GPU (KNOBS_SKIP=max-autotune)
#   bash experiments/gpu_checks.sh lmknobs OUTDIR  # the same on the lm workload
#   bash experiments/gpu_checks.sh search OUTDIR [TRIALS]  # gpu.yaml: search, export, train, report, speedup.py
set -uo pipefail
stage=${1:?stage: tests, knobs or search}
out=${2:?output folder}
mkdir -p "$out"
if [ ! -d .site/databricks ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl 2>&1 | grep -v WARNING | tail -3
    [ -f .whl/ray-site.tar.xz ] && python3 -c "import tarfile; tarfile.open('.whl/ray-site.tar.xz').extractall('.site')"
fi
export PYTHONPATH=$PWD/.site:$PWD PYTHONUNBUFFERED=1 RAY_DEDUP_LOGS=0
py=python3
{ nvidia-smi; $py -c "import torch, ray, optuna, mlflow; print('torch', torch.__version__, 'cuda', torch.version.cuda,
  'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(), '| ray', ray.__version__, '| optuna',
  optuna.__version__, '| mlflow', mlflow.__version__)"; } > "$out/versions.txt" 2>&1

case "$stage" in
trials)  # the search with export/train/report, then speedup.py on its export
    bash "$0" search "$out" "${3:-6}"
    [ -f "$out/best.yaml" ] && bash "$0" speedup "$out" "$out/best.yaml" "${4:-3}"
    ;;
all)  # tests, then the search with export/train/report, then speedup.py on its export: one lease
    NO_PROBE=1 bash "$0" tests "$out"; bash "$0" search "$out" "${3:-6}"
    [ -f "$out/best.yaml" ] && bash "$0" speedup "$out" "$out/best.yaml" "${4:-3}"
    ;;
tests)
    timeout 300 $py -m pytest -q -n 0 -m cuda tests/train/test_cuda.py -p no:cacheprovider -rA --durations=0 \
        > "$out/pytest_cuda.log" 2>&1
    echo "pytest exit $?" >> "$out/pytest_cuda.log"
    # gpu.yaml's baseline and one hand-picked fast recipe, once each: how long a trial takes here.
    [ -n "${NO_PROBE:-}" ] || timeout 150 $py - > "$out/baseline_probe.log" 2>&1 <<'PY'
from autospeed.space import load_spec
from autospeed.train.trainer import train
spec = load_spec("search_spaces/gpu.yaml")
fast = {"batch_size": 512, "lr": 0.4, "schedule": "onecycle", "precision": "bf16", "channels_last": True,
        "data_loader": "device", "cudnn_benchmark": True}
for label, recipe in [("baseline", spec.recipe_for({}, baseline=True)), ("hand-picked", spec.recipe_for(fast))]:
    r = train(recipe)
    print(label, r.status.value, "tta", r.tta_seconds, "best", round(r.best_val_accuracy, 4), "train_s",
          round(r.train_seconds, 2), "samples/s", round(r.samples_per_second), "epochs", round(r.epochs_done, 2),
          "peak MB", r.peak_memory_mb, flush=True)
PY
    ;;
knobs)  # KNOBS_SKIP: labels to leave out (max-autotune's cold compile took 422 s on an H100)
    timeout ${KNOBS_SECONDS:-560} $py experiments/knobs.py --device cuda --workload synthetic \
        --workload-options '{"num_samples": 50000, "image_size": 32, "noise": 6.0}' --rounds ${KNOBS_ROUNDS:-3} \
        --steps 100 --skip ${KNOBS_SKIP:-} --out "$out/knobs_gpu.md" > "$out/knobs.log" 2>&1
    echo "knobs exit $?" >> "$out/knobs.log"
    ;;
lmknobs)  # the lm workload's knobs (bf16, compile, fused AdamW, attention backends, Muon)
    timeout ${KNOBS_SECONDS:-560} $py experiments/knobs.py --device cuda --workload lm --rounds ${KNOBS_ROUNDS:-3} \
        --steps 100 --out "$out/knobs_lm_gpu.md" > "$out/knobs_lm.log" 2>&1
    echo "lm knobs exit $?" >> "$out/knobs_lm.log"
    ;;
search)
    trials=${3:-12}
    work=/tmp/gpu-search; rm -rf $work; mkdir -p $work
    uri=sqlite:///$work/mlflow.db
    {
        timeout -s INT -k 30 ${SEARCH_SECONDS:-300} $py -m autospeed search --space search_spaces/gpu.yaml --trials "$trials" --tracking-uri $uri \
            --storage-path $work/runs --name gpu
        echo "search exit $?"
        $py -m autospeed export --name gpu --tracking-uri $uri --out $work/best.yaml; echo "export exit $?"
        $py -m autospeed train --config $work/best.yaml --tracking-uri $uri; echo "train exit $?"
        $py -m autospeed report --name gpu --tracking-uri $uri --storage-path $work/runs --out $work/report
        echo "report exit $?"
    } > "$out/search.log" 2>&1
    cp $work/best.yaml "$out/" 2>/dev/null
    tar -C $work -czf "$out/report.tgz" report 2>/dev/null
    ;;
speedup)
    timeout ${SPEEDUP_SECONDS:-560} $py experiments/speedup.py --space search_spaces/gpu.yaml --best "${3:?exported recipe}" \
        --repeats "${4:-5}" --goal 5 --work /tmp/gpu-speedup --out "$out/speedup_gpu.md" > "$out/speedup.log" 2>&1
    echo "speedup exit $?" >> "$out/speedup.log"
    ;;
esac
ls -la "$out"
