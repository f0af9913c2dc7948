#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment with the project, its training stack and test tools.
# torch is installed first and pinned, so pip takes the CPU wheel instead of a multi-GB CUDA build.
# Environment: VENV (.venv), PYTHON (python3), WHEELHOUSE (a folder of wheels: install from it alone, with no
# index, for a node without network; make it on a connected machine of the same platform with
#   pip wheel -w WHEELHOUSE "torch==2.13.0" ".[train,dev]"
# taking the CUDA build of torch there for a GPU node).  Dry run: REPLICALAB_DRY_RUN=1 prints the commands (venv, pip)
# instead of running them (launch/dry_run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/dry_run.sh
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || run "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q)
if [ -n "${WHEELHOUSE:-}" ]; then
  [ -d "$WHEELHOUSE" ] || { echo "WHEELHOUSE=$WHEELHOUSE is not a folder" >&2; exit 2; }
  PIP+=(--no-index --find-links "$WHEELHOUSE")
else
  run "${PIP[@]}" --upgrade pip
fi
run "${PIP[@]}" "torch==2.13.0"
run "${PIP[@]}" -e ".[train,dev]"
dry_run || echo "environment ready: $VENV"
