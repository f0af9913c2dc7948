#!/usr/bin/env bash
# Sourced by the launch scripts (runs nothing by itself): their dry-run mode.  With REPLICALAB_DRY_RUN=1 in the
# environment a launcher prints every command it would start, one line each -- "+ " and the command's words,
# shell-quoted (bash's printf %q) -- instead of starting it, so nothing is installed, submitted or trained.  Checks
# that only read (is a Python module installed, is a GPU there, which nodes SLURM gave) still run.
#   REPLICALAB_DRY_RUN=1 bash launch/local.sh grpo.max_steps=2

# dry_run: true when REPLICALAB_DRY_RUN=1.
dry_run() {
  [ "${REPLICALAB_DRY_RUN:-0}" = 1 ]
}

# run COMMAND...: start COMMAND; in a dry run print it instead.
run() {
  if dry_run; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}
