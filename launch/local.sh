#!/usr/bin/env bash
# A fresh machine to the main job on the embedded default: set up, train the committed default model
# (artifacts/default-model, or $REPLICALAB_DEFAULT_MODEL) with GRPO (configs/train/default.yaml), then
# evaluate the trained checkpoint, its warm start and the scripted Scientists on held-out seeds
# (configs/eval/default.yaml).  Extra arguments go to `train`.  `train` uses the committed warm start while
# its fingerprint matches the code; otherwise it says so (and how long it takes) and rebuilds it first.
# Dry run: REPLICALAB_DRY_RUN=1 bash launch/local.sh [ARGS] prints the three commands (setup, train, eval) instead
# of running them -- nothing is installed (launch/dry_run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/dry_run.sh
run bash launch/setup.sh
export HF_HUB_OFFLINE=1 WANDB_MODE="${WANDB_MODE:-offline}" RAY_USAGE_STATS_ENABLED=0
RL=.venv/bin/replicalab
run "$RL" train --config configs/train/default.yaml "$@"
run "$RL" eval --config configs/eval/default.yaml
echo "report: runs/eval-default/report.md"
