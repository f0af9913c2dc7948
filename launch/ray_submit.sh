#!/usr/bin/env bash
# Submit a training run as a Ray job to the cluster at $RAY_ADDRESS (e.g. http://head:8265).
#   RAY_ADDRESS=http://127.0.0.1:8265 bash launch/ray_submit.sh configs/train/default.yaml grpo.max_steps=4
# The working directory is shipped as the job's runtime env; the job joins the cluster's Ray
# (rollout.ray_address=auto) instead of starting its own.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RAY_ADDRESS:?set RAY_ADDRESS to the Ray dashboard address, e.g. http://127.0.0.1:8265}"
CONFIG="${1:-configs/train/default.yaml}"
shift || true
RAY="${RAY:-.venv/bin/ray}"
PY="${JOB_PYTHON:-$(pwd)/.venv/bin/python}"
RUNTIME_ENV=$(printf '{"working_dir": ".", "excludes": [".venv", "runs", "artifacts", ".git", "wandb"], "env_vars": {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "%s", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": "."}}' "${WANDB_MODE:-offline}")
exec "$RAY" job submit --address "$RAY_ADDRESS" --runtime-env-json "$RUNTIME_ENV" ${SUBMIT_ARGS:-} -- \
  "$PY" -m replicalab.cli train --config "$CONFIG" rollout.ray_address=auto "$@"
