#!/usr/bin/env bash
# Submit a training run as a Ray job to the cluster at $RAY_ADDRESS (the dashboard, e.g. http://head:8265).
#   RAY_ADDRESS=http://127.0.0.1:8265 bash launch/ray_submit.sh configs/train/default.yaml grpo.max_steps=4
# The working directory is shipped as the job's runtime env; the job joins the cluster's Ray
# (rollout.ray_address=auto) instead of starting its own.  Exits with the job's outcome.
# Environment: RAY (.venv/bin/ray), JOB_PYTHON (.venv/bin/python), SUBMIT_RETRIES (24).  Dry run:
# REPLICALAB_DRY_RUN=1 prints the submit, logs and status commands instead of running them (launch/dry_run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/dry_run.sh
: "${RAY_ADDRESS:?set RAY_ADDRESS to the Ray dashboard address, e.g. http://127.0.0.1:8265}"
CONFIG="${1:-configs/train/default.yaml}"
shift || true
RAY="${RAY:-.venv/bin/ray}"
PY="${JOB_PYTHON:-$(pwd)/.venv/bin/python}"
RUNTIME_ENV=$(printf '{"working_dir": ".", "excludes": [".venv", "runs", "artifacts", ".git", "wandb"], "env_vars": {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "%s", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": "."}}' "${WANDB_MODE:-offline}")
JOB_ID="replicalab-$(date +%Y%m%d-%H%M%S)-$$"
SUBMIT=("$RAY" job submit --address "$RAY_ADDRESS" --submission-id "$JOB_ID" --no-wait
        --runtime-env-json "$RUNTIME_ENV" -- "$PY" -m training.cli train --config "$CONFIG"
        rollout.ray_address=auto "$@")
if dry_run; then
  run "${SUBMIT[@]}"
  run "$RAY" job logs --address "$RAY_ADDRESS" --follow "$JOB_ID"
  run "$RAY" job status --address "$RAY_ADDRESS" "$JOB_ID"
  exit 0
fi
# A fresh head needs a few seconds before its job agent accepts submissions.
for attempt in $(seq 1 "${SUBMIT_RETRIES:-24}"); do
  if out=$("${SUBMIT[@]}" 2>&1); then
    break
  fi
  case "$out" in
    *"No available agent"*|*"Failed to connect"*) sleep 5 ;;
    *) echo "$out" >&2; exit 1 ;;
  esac
  [ "$attempt" -lt "${SUBMIT_RETRIES:-24}" ] || { echo "$out" >&2; exit 1; }
done
echo "submitted Ray job $JOB_ID to $RAY_ADDRESS"
"$RAY" job logs --address "$RAY_ADDRESS" --follow "$JOB_ID"
# `ray job status` ends with decoration lines, so look for the outcome anywhere in its output.
status=$("$RAY" job status --address "$RAY_ADDRESS" "$JOB_ID" 2>&1)
echo "$status"
if grep -Eq "SUCCEEDED|' succeeded" <<<"$status"; then exit 0; fi
exit 1
