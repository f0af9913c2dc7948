#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment with the project, its training stack and test tools.
# torch is installed first and pinned, so pip takes the CPU wheel instead of a multi-GB CUDA build.
# Environment: VENV (.venv), PYTHON (python3).  Dry run: REPLICALAB_DRY_RUN=1 prints the commands (venv, pip)
# instead of running them (launch/dry_run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/dry_run.sh
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || run "$PYTHON" -m venv "$VENV"
run "$VENV/bin/python" -m pip install -q --upgrade pip
run "$VENV/bin/python" -m pip install -q "torch==2.13.0"
run "$VENV/bin/python" -m pip install -q -e ".[train,dev]"
dry_run || echo "environment ready: $VENV"
