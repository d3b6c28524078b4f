#!/usr/bin/env bash
# Set up, then run the test suite (plugin logic on a fake benchmark, real MIKASA episodes, a few
# short LIBERO, LIBERO-PRO, Push-T and Meta-World ones, LeRobot checkpoints in LeRobot's interpreter).
# --durations=20: the slowest tests, in every log (CI's included).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --libero --metaworld --lerobot
./scripts/install_browser.sh
./scripts/install_cluster_tools.sh
exec .venv/bin/python -m pytest --durations=20 "$@"
