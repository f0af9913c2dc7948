#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment with the project, its training stack and test tools.
# torch is installed first and pinned, so pip takes the CPU wheel instead of a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[train,dev]"
echo "environment ready: $VENV"
