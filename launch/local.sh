#!/usr/bin/env bash
# A fresh machine to the main job on the embedded default: set up, build the default model,
# then show the game and measure it on held-out seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
export HF_HUB_OFFLINE=1 WANDB_MODE="${WANDB_MODE:-offline}" RAY_USAGE_STATS_ENABLED=0
RL=.venv/bin/replicalab
MODEL_DIR="${REPLICALAB_DEFAULT_MODEL:-artifacts/default-model}"
[ -f "$MODEL_DIR/config.json" ] || $RL build-default-model --out "$MODEL_DIR"
$RL play --seed 1000003 --template cell_biology --difficulty hard --scientist adaptive
$RL play --seed 1000003 --template cell_biology --difficulty hard --scientist "model:$MODEL_DIR"
$RL bench env
