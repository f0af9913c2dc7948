#!/usr/bin/env bash
# The GPU path end to end on one CUDA device, with no download: build the larger embedded-style model
# (configs/model/gpu.yaml) and check it in both seats on held-out seeds, train it with GRPO
# (configs/train/gpu-embedded.yaml), then evaluate the trained model against its warm start and the
# scripted Scientists (configs/eval/gpu-embedded.yaml).  Logs and reports are copied to LOG_DIR.
#   bash launch/gpu_check.sh [build|train|engines|figures|selfplay|all] [LOG_DIR] [TRAIN KEY=VALUE ...]
# engines: sets up the vLLM environment (launch/setup_vllm.sh) if missing, compares the rollout engines on
# the built model (replicalab bench engines: tokens/s, episodes/s, log-prob mismatch) and trains with
# rollout.engine=vllm.
# figures: bench generate (decoding at batch 128 with each KV cache against the card's bandwidth, and a profile of
# one static-cache call: the embedded default, a random model of Qwen2.5-0.5B's shape and the built model when there
# is one), bench train in-process on gpu-embedded.yaml (step times, and the planner's memory estimate against the
# measured peaks), pytest -m gpu (tests/training/test_cuda_path.py needs only torch and transformers) and, where Ray
# is installed, bench sync, bench engines (vLLM too when .venv-vllm exists) and bench train at
# rollout.max_staleness 0 and 1.  Each step's output goes to $OUT/gpu_figures.md (OUT unset: LOG_DIR/gpu_figures.md)
# with the card's name, then a table of every step's status and seconds (whole logs: LOG_DIR/figures-N.log); the
# stage fails when a step fails.  A step runs at most STEP_TIMEOUT_S seconds (default 900).  It installs nothing:
# on a node without network, set up first from a wheelhouse (WHEELHOUSE=DIR bash launch/setup.sh).
# selfplay: a short self-play run of both seats on CUDA in-process (configs/train/selfplay.yaml on the embedded default,
# every reply under its role's grammar, both seats bound, branch groups that borrow a chance, 3 Scientist groups of 4).
# BUILD_ARGS adds build-default-model overrides (e.g. BUILD_ARGS="sft.lm_steps=500").
# Dry run: REPLICALAB_DRY_RUN=1 prints the commands of the chosen stages (the CUDA check, builds, training,
# evaluation, benches, copies into LOG_DIR) instead of running them; nothing is written (launch/dry_run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/dry_run.sh
STAGE="${1:-all}"
LOGS="${2:-runs/gpu-check}"
shift $(( $# < 2 ? $# : 2 ))
PY="${PYTHON:-python3}"
RL=("$PY" -m training.cli)
MODEL_DIR=artifacts/gpu-model
export HF_HUB_OFFLINE=1 WANDB_MODE="${WANDB_MODE:-offline}" RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1

# logged LOG COMMAND...: run COMMAND, its output shown and kept in $LOGS/LOG (a dry run prints COMMAND).
logged() {
  local log="$LOGS/$1"
  shift
  if dry_run; then run "$@"; else "$@" 2>&1 | tee "$log"; fi
}

run mkdir -p "$LOGS"
run "$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('device:', torch.cuda.get_device_name(0))"
WANDB_ARGS=()
"$PY" -c "import wandb" 2>/dev/null || { echo "wandb is not installed: W&B logging disabled"; WANDB_ARGS=(wandb.mode=disabled); }

if [[ "$STAGE" == build || "$STAGE" == all ]]; then
  # shellcheck disable=SC2086  # BUILD_ARGS is a list of KEY=VALUE words
  logged build.log "${RL[@]}" build-default-model --out "$MODEL_DIR" --config configs/model/gpu.yaml ${BUILD_ARGS:-}
  run cp "$MODEL_DIR/build_info.json" "$LOGS/"
fi
if [[ "$STAGE" == train || "$STAGE" == all ]]; then
  logged train.log "${RL[@]}" train --config configs/train/gpu-embedded.yaml "${WANDB_ARGS[@]}" "$@"
  run cp runs/gpu-embedded-scientist/metrics.jsonl "$LOGS/"
  logged eval.log "${RL[@]}" eval --config configs/eval/gpu-embedded.yaml "${WANDB_ARGS[@]}"
  run cp runs/eval-gpu-embedded/report.md "$LOGS/"
fi
if [[ "$STAGE" == engines || "$STAGE" == all ]]; then
  [ -x .venv-vllm/bin/python ] || logged setup_vllm.log bash launch/setup_vllm.sh
  logged engines.log "${RL[@]}" bench engines --model "$MODEL_DIR" --episodes 64 --workers 1
  logged train_vllm.log "${RL[@]}" train --config configs/train/gpu-embedded.yaml "${WANDB_ARGS[@]}" \
    rollout.engine=vllm run_name=gpu-embedded-vllm "$@"
  run cp runs/gpu-embedded-vllm/metrics.jsonl "$LOGS/metrics_vllm.jsonl"
fi
if [[ "$STAGE" == selfplay || "$STAGE" == all ]]; then
  logged selfplay.log "${RL[@]}" train --config configs/train/selfplay.yaml device=cuda rollout.backend=inprocess \
    "${WANDB_ARGS[@]}" "rollout.sampling.bound_roles=[lab_manager,scientist]" grpo.branch.without_chance=borrow \
    grpo.branch.other_share=0 "data.role_weights={scientist: 3}" grpo.max_steps=4 validation.every_steps=4 \
    validation.episodes=9 run_name=gpu-selfplay "$@"
  run cp runs/gpu-selfplay/metrics.jsonl "$LOGS/metrics_selfplay.jsonl"
fi
if [[ "$STAGE" == figures || "$STAGE" == all ]]; then
  # no setup here (a node without network runs this stage): vLLM joins the engines bench when its environment exists
  ENGINES="--engines hf"; [ -x .venv-vllm/bin/python ] && ENGINES="--engines hf vllm"
  FIGURES="${OUT:-$LOGS}/gpu_figures.md"
  BUILT=(); [ -d "$MODEL_DIR" ] && BUILT=("$MODEL_DIR")
  TRAIN_MODEL="model=${BUILT[0]:-default}"
  RAY_STEPS=("-m training.cli bench sync --shape 0.5b"
             "-m training.cli bench engines ${BUILT[*]/#/--model } $ENGINES --episodes 32 --workers 1"
             "-m training.cli bench train --staleness 0 1 --steps 4 rollout.backend=ray rollout.num_workers=1 device=cuda $TRAIN_MODEL")
  STEPS=("-m training.cli bench generate --model default shape:0.5b ${BUILT[*]} --batch 128 --prompt-tokens 512 --new-tokens 64 --profile"
         "-m training.cli bench train --config configs/train/gpu-embedded.yaml --steps 3 $TRAIN_MODEL"
         "-m pytest -q -m gpu tests"
         "${RAY_STEPS[@]}")
  if dry_run; then
    # shellcheck disable=SC2086  # each step is a list of words
    for step in "${STEPS[@]}"; do run "$PY" $step; done
  else
    HAS_RAY=1; "$PY" -c "import ray" 2>/dev/null || HAS_RAY=0
    SUMMARY=(); FAILED=0; N=0
    { echo "# GPU figures, $(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
      for step in "${STEPS[@]}"; do
        echo; echo "## python $step"
        if [[ $HAS_RAY == 0 && " ${RAY_STEPS[*]} " == *" $step "* ]]; then
          echo "skipped: Ray is not installed"; SUMMARY+=("| $step | skipped: no Ray | - |"); continue
        fi
        echo '```'
        started=$SECONDS; N=$((N + 1))
        # shellcheck disable=SC2086  # each step is a list of words
        rc=0; timeout "${STEP_TIMEOUT_S:-900}" "$PY" $step > "$LOGS/figures-$N.log" 2>&1 || rc=$?
        grep -v -e Warning -e warnings.warn "$LOGS/figures-$N.log" | tail -40
        echo '```'
        status=ok; [ "$rc" = 0 ] || { status="FAILED (exit $rc)"; FAILED=1; }
        SUMMARY+=("| $step | $status | $((SECONDS - started)) |")
      done
      echo; echo "## Summary"; echo; echo "| step | status | seconds |"; echo "|---|---|---|"
      printf '%s\n' "${SUMMARY[@]}"
      echo "$FAILED" > "$LOGS/figures.failed"; } | tee "$FIGURES"
    [ "$(cat "$LOGS/figures.failed")" = 0 ] || { echo "figures: a step failed (see $FIGURES)" >&2; exit 1; }
  fi
fi
