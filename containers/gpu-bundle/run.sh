#!/bin/sh
# The offline GPU bundle's one command, on a machine with torch and no internet. Built here
# by `python -m llm_pipeline.bundle build OUT` (README: "On a GPU machine without internet").
#
#   ./run.sh [--tiny]        PYTHON (default python3): the machine's Python with its torch
#                            OUT (default ./out): where the figures and runs go
#
# 1. installs the bundle's wheels into ./site (once), beside the machine's own torch;
# 2. checks that the bundle's packages are the ones Python sees and that what the bundle
#    leaves out (the machine's own: torch, numpy, ...) meets the project's requirements;
# 3. runs benchmarks/gpu_train.py and prints its table (--tiny: tiny shapes, any device;
#    GPU_TRAIN_ARGS adds options, e.g. "--only t5");
# 4. runs configs/local_gpu.json end to end on the bundle's rows (not with --tiny).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
out=${OUT:-$here/out}
tiny=""
case "${1:-}" in
  --tiny) tiny=--tiny ;;
  "") ;;
  *) echo "usage: ./run.sh [--tiny]" >&2; exit 2 ;;
esac
mkdir -p "$out"
if [ ! -f "$here/site/.installed" ]; then
  # What an install killed part-way left: pip --target skips a package folder already there.
  rm -rf "$here/site"
  echo "installing $(ls "$here"/whl/*.whl | wc -l) wheels into $here/site"
  "$python" -m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check \
    --target "$here/site" "$here"/whl/*.whl
  touch "$here/site/.installed"
fi
# The bundle's packages first: a machine's own (older) copy of one must not win.
PYTHONPATH="$here/site:$here/pkgs${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
"$python" -m llm_pipeline.bundle check "$here"
cd "$here/project"
# shellcheck disable=SC2086  # GPU_TRAIN_ARGS is a list of options
"$python" benchmarks/gpu_train.py $tiny --json "$out/gpu_train.json" ${GPU_TRAIN_ARGS:-}
if [ -n "$tiny" ]; then
  echo "--tiny: configs/local_gpu.json not run (a GPU run of minutes)"
else
  "$python" -m llm_pipeline.bundle pipeline "$here" configs/local_gpu.json \
    --pipeline-root "$out/runs" --set "deploy.registry_dir=$out/registry"
fi
