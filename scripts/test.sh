#!/usr/bin/env bash
# Set up, then run the test suite (plugin logic on a fake benchmark, and real MIKASA episodes).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
