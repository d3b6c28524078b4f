#!/usr/bin/env bash
# Set up, then run the test suite (plugin logic on a fake benchmark, real MIKASA episodes, a few
# short LIBERO, LIBERO-PRO, Push-T and Meta-World ones, LeRobot checkpoints in LeRobot's interpreter).
# The cases marked long are left out unless --long is given (`./scripts/test.sh --long -m long` runs
# only them, as CI does after this command). --durations=10: the ten slowest, in every log.
# Two xdist workers, a file's cases on one (its module fixtures made once): most cases wait on the
# sessions, servers and simulators they start, so two keep two cores busy; `-n 0` runs serially.
# --no-loadscope-reorder: files go out in tests/conftest.py's order, the ones marked `minutes` first
# (longest first), so no file of minutes starts last and runs alone.
# VLAEVAL_SKIP_SETUP=1 skips the set-up (a minute even when nothing is missing: each stack's check
# imports it), for a second run on a machine the first one set up, as CI's run of the long cases.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${VLAEVAL_SKIP_SETUP:-}" != 1 ]; then
    ./scripts/setup.sh --all  # every stack `vlaeval install --list` names
    ./scripts/install_browser.sh
    ./scripts/install_cluster_tools.sh
fi
# Idle OpenMP threads sleep rather than spin: torch in one case's processes would otherwise burn
# the core the other worker's case needs (the numbers do not change, only the waiting).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec .venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=10 "$@"
