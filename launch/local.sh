#!/usr/bin/env bash
# A fresh machine to the main job on the embedded default: set up, build the default model, train it
# with GRPO (configs/train/default.yaml), then evaluate the trained checkpoint, its warm start and the
# scripted Scientists on held-out seeds (configs/eval/default.yaml).  Extra arguments go to `train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
export HF_HUB_OFFLINE=1 WANDB_MODE="${WANDB_MODE:-offline}" RAY_USAGE_STATS_ENABLED=0
RL=.venv/bin/replicalab
MODEL_DIR="${REPLICALAB_DEFAULT_MODEL:-artifacts/default-model}"
[ -f "$MODEL_DIR/config.json" ] || $RL build-default-model --out "$MODEL_DIR"
$RL train --config configs/train/default.yaml "$@"
$RL eval --config configs/eval/default.yaml
echo "report: runs/eval-default/report.md"
