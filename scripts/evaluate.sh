#!/usr/bin/env bash
# The main job: set up, then evaluate the built-in random policy on the short split of
# MIKASA-Robo-VLA (1 episode per task, 2 workers) and print the results table.
# Extra arguments go to pytest, e.g. --episodes=5 or --policy=my_pkg.policies:make_policy.
set -uo pipefail
case "${1:-}" in
-h | --help)
    echo "usage: scripts/evaluate.sh [PYTEST_ARGS...]"
    echo "Set up, then evaluate the random policy on MIKASA-Robo-VLA's short split (1 episode per task, -n 2)."
    echo "Exit 0 when the evaluation ran (failed episodes are results); otherwise pytest's status."
    exit 0
    ;;
esac
cd "$(dirname "$0")/.."
./scripts/setup.sh || exit
.venv/bin/python -m pytest --benchmark=short --policy=random --episodes=1 -n 2 -q -rE "$@"
status=$?
# Failed episodes are results (exit 1: they are in the table above); anything else means the
# evaluation itself broke.
if [ "$status" -le 1 ]; then exit 0; fi
exit "$status"
