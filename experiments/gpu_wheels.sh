#!/usr/bin/env bash
# Fill .whl/ with the wheels the offline GPU machine lacks: ../shared/tools/device-wheels.sh (Ray, Optuna,
# MLflow skinny and their needs), plus databricks-sdk, which that script leaves out but which `import mlflow`
# needs: mlflow/genai/scorers/validation.py calls importlib.util.find_spec("databricks.agents"), and
# find_spec raises ModuleNotFoundError when the parent package `databricks` is missing (seen on an H100 host);
# and cryptography (with cffi, pycparser), which MLflow's SQLite tracking store imports when it opens.
set -euo pipefail
mkdir -p .git/info && touch .git/info/exclude
bash "$(dirname "$0")/../../shared/tools/device-wheels.sh" rich "$@"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl databricks-sdk cryptography cffi pycparser 2>&1 | grep -v 'is ignored' || true
# The working tree plus .whl must stay under the device's 64 MiB: Ray's wheel (45 MB zipped) is
# repacked as an xz tar of its files (30 MB), which gpu_checks.sh unpacks into .site.
ray_whl=$(ls .whl/ray-*.whl 2>/dev/null | head -1)
if [ -n "$ray_whl" ]; then
    tmp=$(mktemp -d); (cd "$tmp" && unzip -q "$OLDPWD/$ray_whl" && tar -cf - . | xz -T0 -6 > "$OLDPWD/.whl/ray-site.tar.xz")
    rm -rf "$tmp" "$ray_whl"
fi
ls .whl | wc -l; du -sh .whl
