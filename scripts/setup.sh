#!/usr/bin/env bash
# Set up a virtual env (.venv) for developing pytest-vlaeval, idempotently: this package with its
# test extras, then one `vlaeval install STACK ... --system-deps`: mikasa (the MIKASA simulator
# stack, software Vulkan when the machine has no NVIDIA GPU, the benchmark's missing data file, and a
# check) and pusht (Push-T, pure Python). With --libero, libero too, into the same env (LIBERO and
# LIBERO-PRO); with --metaworld, metaworld, into an interpreter of its own under the env
# (.venv/vlaeval-interpreters); with --lerobot, lerobot: LeRobot's interpreter there, made with a
# Python 3.12 or 3.13 the machine has (about 4 minutes and 5.8 GB the first time). The stacks with
# interpreters of their own install beside this env's (`vlaeval install` with several stacks).
#
# Usage: scripts/setup.sh [--STACK ... | --all], STACK one of `vlaeval install --list` (the built-in
# benchmarks' stacks, from their files' install sections, and lerobot); --all: every one of them.
#
# Environment: VLAEVAL_VENV (default .venv), PYTHON (default python3.11, else python3.10 or python3),
# VLAEVAL_ASSET_DIR (a folder holding the asset, instead of its pinned URL).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VLAEVAL_VENV:-.venv}
say() { printf '[setup] %s\n' "$*"; }

stacks=(mikasa pusht)  # what the test suite needs; the others on request
extra=()
all=false
for arg in "$@"; do
    case "$arg" in
        --all) all=true ;;
        --*) extra+=("${arg#--}") ;;
        *) echo "usage: scripts/setup.sh [--STACK ... | --all]" >&2; exit 2 ;;
    esac
done

pick_python() {
    if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
    for candidate in python3.11 python3.10 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] < (3, 12)))'; then
            echo "$candidate"; return
        fi
    done
    echo "[setup] the simulator stacks need Python 3.10 or 3.11; set PYTHON to one" >&2
    exit 1
}

[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$(pick_python)" -m venv "$VENV"; }
stamp="$VENV/.vlaeval-setup"
wanted=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
    say "pytest-vlaeval (editable, with its test extras): up to date"
else
    say "installing pytest-vlaeval (editable, with its test extras)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]"
    echo "$wanted" >"$stamp"
fi
known=$("$VENV/bin/vlaeval" install --list)
if $all; then
    mapfile -t extra <<<"$known"
fi
for stack in "${extra[@]}"; do
    if ! grep -qx -- "$stack" <<<"$known"; then
        echo "usage: scripts/setup.sh [--STACK ... | --all]; STACK one of:" $known >&2
        exit 2
    fi
    if [[ " ${stacks[*]} " != *" $stack "* ]]; then
        stacks+=("$stack")
    fi
done
# One command: the Debian packages first, then the stacks with interpreters of their own install
# beside this env's (4 min 44 s from nothing on two cores, 8 min 37 s one after another).
"$VENV/bin/vlaeval" install "${stacks[@]}" --system-deps
say "done: activate with 'source $VENV/bin/activate'"
