#!/usr/bin/env bash
# Constrained decoding on one CUDA device with no Ray, TRL or W&B: whole trajectories of both seats, decoded under
# their grammars (a Scientist's key changing turn by turn), rescored exactly under each reply's mask
# (tests/training/rollout/test_constrained_scoring.py, its cpu and cuda cases).  Packages the node lacks
# (pydantic, llguidance, the pinned transformers) install first from a wheelhouse: WHEELS=DIR (default .whl).
#   bash launch/gpu_constrained.sh [LOG_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
LOGS="${1:-${OUT:-runs/gpu-constrained}}"
WHEELS="${WHEELS:-.whl}"
mkdir -p "$LOGS"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('device:', torch.cuda.get_device_name(0))"
python3 -m pytest -q -p no:cacheprovider -rs tests/training/rollout/test_constrained_scoring.py 2>&1 | tee "$LOGS/constrained.log"
