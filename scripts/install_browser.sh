#!/usr/bin/env bash
# What the browser tests (marker "browser") need: Debian's headless Chromium and Playwright for
# Python in the project's virtual env, driving that Chromium (no browser download of its own).
# Idempotent: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
if ! .venv/bin/python -c "import playwright" 2>/dev/null; then
    .venv/bin/python -m pip install -q playwright
fi
