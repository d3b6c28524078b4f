#!/usr/bin/env bash
# Set up, then run the test suite (plugin logic on a fake benchmark, real MIKASA episodes and a few
# short LIBERO ones).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --libero
./scripts/install_browser.sh
exec .venv/bin/python -m pytest "$@"
