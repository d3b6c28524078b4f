#!/usr/bin/env bash
# The GPU path in one command, on a machine that reaches no package index: loaders, ICDs, the
# simulator stack from the wheel cache, then scripts/gpu_bench.py's table (render parity, scaling,
# blocks of episodes, placement, serving, LIBERO on EGL). Without a CUDA device the GPU rows are
# skipped and the rest runs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${VLAEVAL_GPU_CACHE:-$ROOT/.gpu-cache}     # parts of the wheel and .deb cache (git-ignored)
PREFIX=${VLAEVAL_GPU_PREFIX:-$ROOT/.gpu-env}     # the installed stack, the unpacked loaders, the joined wheels
PYTHON=${PYTHON:-python3}
PART_MIB=${VLAEVAL_GPU_PART_MIB:-60}
DEBS=(libvulkan1 libegl1 libglvnd0)
ICD_GLOBS=(/usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json
    /usr/local/nvidia/icd.d/nvidia_icd*.json /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd*.json)
EGL_GLOBS=(/usr/share/glvnd/egl_vendor.d/*nvidia*.json /etc/glvnd/egl_vendor.d/*nvidia*.json
    /usr/local/nvidia/share/glvnd/egl_vendor.d/*nvidia*.json)

usage() {
    cat <<EOF
usage: scripts/gpu_check.sh [--smoke] [GPU_BENCH_ARGS...]
       scripts/gpu_check.sh --script SCRIPT [ARGS...]
       scripts/gpu_check.sh --fetch-wheels [--libero]

Run scripts/gpu_bench.py's table on this machine, setting up what it lacks first:
  - the Vulkan and EGL loaders, unpacked from the cached .deb files when ldconfig finds none;
  - the NVIDIA Vulkan ICD and EGL vendor files, exported as VK_DRIVER_FILES and
    __EGL_VENDOR_LIBRARY_FILENAMES when found and not already set;
  - when \$PYTHON ($PYTHON) cannot import the simulator stack: the wheel cache installed with
    --no-index into $PREFIX/site, put first on PYTHONPATH beside \$PYTHON's own CUDA torch (no
    package index needed), with this package; LIBERO's too when its wheels are in the cache.
Without a CUDA device it prints "no CUDA device: GPU rows skipped" and runs the CPU rows.

--fetch-wheels (where a package index is reachable): download scripts/gpu-requirements.txt (with
--libero also scripts/gpu-requirements-libero.txt) as CPython 3.12 manylinux wheels and the
loaders' .deb files, in parts of at most $PART_MIB MiB under $CACHE/part-NN (bigger files split in
pieces), so that each part can travel on its own.
--smoke: gpu_bench.py's few-minute version (one episode per task, LIBERO's render check).
--script SCRIPT: run another Python script instead of gpu_bench.py, after the same setup (e.g.
scripts/bench_reference_order.py --render gpu-render).
With VLAEVAL_ASSET_DIR set, the data files the benchmark's wheels lack are installed from it first.
Environment: PYTHON, VLAEVAL_GPU_CACHE, VLAEVAL_GPU_PREFIX, VLAEVAL_GPU_PART_MIB.
EOF
}

say() { echo "gpu_check: $*" >&2; }

fetch_wheels() {
    local flat="$CACHE/download" files=("$ROOT/scripts/gpu-requirements.txt")
    [ "${1:-}" != --libero ] || files+=("$ROOT/scripts/gpu-requirements-libero.txt")
    mkdir -p "$flat"
    local platforms=()
    for tag in manylinux1 manylinux_2_5 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 linux; do
        platforms+=(--platform "${tag}_x86_64")
    done
    grep -hv '^#' "${files[@]}" | while read -r requirement; do
        [ -n "$requirement" ] || continue
        "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --ignore-requires-python \
            --only-binary=:all: --implementation cp --python-version 3.12 "${platforms[@]}" -d "$flat" "$requirement" ||
            # Pure-Python packages published as source only: build their wheel here, once.
            "$PYTHON" -m pip wheel -q --disable-pip-version-check --no-deps -w "$flat" "$requirement"
    done
    (cd "$flat" && apt-get download "${DEBS[@]}")
    pack_parts "$flat"
    rm -rf "$flat"
    du -sh "$CACHE"/part-* >&2
}

pack_parts() {
    # Files into part-NN folders of at most PART_MIB MiB, first fit by decreasing size, after cutting
    # every bigger file into pieces of that size: as few parts as the limit allows.
    local flat=$1 limit=$((PART_MIB * 1024 * 1024)) used=() size name part
    find "$flat" -maxdepth 1 -type f -size +"$((limit - 1))"c | while read -r big; do
        split -b "$limit" -d "$big" "$big.piece-" && rm "$big"
    done
    while read -r size name; do
        for ((part = 0; part < ${#used[@]}; part++)); do
            [ $((used[part] + size)) -le "$limit" ] && break
        done
        used[part]=$((${used[part]:-0} + size))
        mkdir -p "$CACHE/$(printf 'part-%02d' "$part")"
        mv "$flat/$name" "$CACHE/$(printf 'part-%02d' "$part")/"
    done < <(find "$flat" -maxdepth 1 -type f -printf '%s %f\n' | sort -rn)
}

join_cache() {
    # The parts back into one folder, pieces joined in order.
    local joined="$PREFIX/cache"
    mkdir -p "$joined"
    find "$CACHE" -path "$CACHE/part-*" -type f ! -name '*.piece-*' -exec cp -u {} "$joined/" \;
    find "$CACHE" -path "$CACHE/part-*" -name '*.piece-00' | while read -r first; do
        local name
        name=$(basename "${first%.piece-00}")
        [ -f "$joined/$name" ] || find "$CACHE" -name "$name.piece-*" -printf '%f %p\n' | sort | cut -d' ' -f2- |
            xargs cat >"$joined/$name"
    done
    echo "$joined"
}

setup_loaders() {
    local missing=() libs
    # Read the cache once and match in bash: `ldconfig -p | grep -q` fails at random under
    # pipefail, when grep exits at its first match and ldconfig dies of SIGPIPE.
    libs=$(ldconfig -p)
    [[ $libs == *"libvulkan.so.1 "* ]] || missing+=(libvulkan1)
    [[ $libs == *"libEGL.so.1 "* ]] || missing+=(libegl1 libglvnd0)
    [ ${#missing[@]} -gt 0 ] || return 0
    local cache root="$PREFIX/sysroot"
    cache=$(join_cache)
    for package in "${missing[@]}"; do
        local deb
        deb=$(find "$cache" -name "${package}_*.deb" | head -n 1)
        if [ -z "$deb" ]; then
            say "no $package in ldconfig and no ${package}_*.deb in $CACHE: run --fetch-wheels where apt works"
            return 1
        fi
        dpkg -x "$deb" "$root"
    done
    export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "loaders from .deb files: ${missing[*]} (LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu)"
}

first_file() {
    for pattern in "$@"; do
        [ -f "$pattern" ] && { echo "$pattern"; return 0; }
    done
    return 1
}

setup_icds() {
    command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || return 0
    local icd egl
    if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && icd=$(first_file "${ICD_GLOBS[@]}"); then
        export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd
        say "NVIDIA Vulkan ICD: $icd"
    fi
    if [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] && egl=$(first_file "${EGL_GLOBS[@]}"); then
        export __EGL_VENDOR_LIBRARY_FILENAMES=$egl
        say "NVIDIA EGL vendor: $egl"
    fi
}

requirement_names() {
    grep -hv '^#' "$@" | sed -n 's/==.*//p'
}

install_stack() {
    # The wheel cache into $PREFIX/site, then this package (built, not editable: pytest finds the
    # plugin by its entry point); LIBERO's wheels only when the cache holds them.
    local cache site="$PREFIX/site" files=("$ROOT/scripts/gpu-requirements.txt")
    cache=$(join_cache)
    if compgen -G "$cache/robosuite-*.whl" >/dev/null; then
        files+=("$ROOT/scripts/gpu-requirements-libero.txt")
    fi
    say "installing $(requirement_names "${files[@]}" | wc -l) packages from the wheel cache into $site (no package index)"
    for file in "${files[@]}"; do
        "$PYTHON" -m pip install -q --disable-pip-version-check --no-index --find-links "$cache" --no-deps \
            --ignore-requires-python --upgrade --target "$site" -r "$file" >&2
    done
    "$PYTHON" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation \
        --upgrade --target "$site" "$ROOT" >&2
}

missing_modules() {
    # What the stack imports, from the image or the cache: one line per module that fails.
    "$1" - <<'EOF'
import importlib
names = "torch numpy scipy h5py cv2 matplotlib imageio lxml networkx huggingface_hub tensorboard colorama requests"
names += " tqdm tabulate pytest xdist yaml rich msgpack PIL packaging psutil pynvml"
names += " gymnasium sapien mani_skill mikasa_robo_suite msgspec jinja2 websockets"
# The package's modules that import its dependencies (its top level imports none of them).
names += " pytest_vlaeval.benchmark.model pytest_vlaeval.envs.mikasa pytest_vlaeval.controller.plugin"
for name in names.split():
    try:
        importlib.import_module(name)
    except Exception as exc:
        print(f"{name} ({type(exc).__name__}: {exc})")
EOF
}

use_stack() {
    # $PYTHON as it is when it runs the stack, else with the installed stack first on PYTHONPATH
    # (exported here, so not in a subshell).
    local probe="import pytest_vlaeval.envs.mikasa, mani_skill, sapien, mikasa_robo_suite, torch, xdist" missing
    "$PYTHON" -c "$probe" 2>/dev/null && return 0
    export PYTHONPATH="$PREFIX/site${PYTHONPATH:+:$PYTHONPATH}"
    "$PYTHON" -c "$probe" 2>/dev/null || install_stack
    missing=$(missing_modules "$PYTHON")
    if [ -n "$missing" ]; then
        say "the stack does not import with $PYTHON (PYTHONPATH=$PYTHONPATH):"
        printf '  %s\n' "$missing" >&2
        return 1
    fi
}

main() {
    case "${1:-}" in
    -h | --help) usage; return 0 ;;
    --fetch-wheels) fetch_wheels "${2:-}"; return ;;
    esac
    local script="$ROOT/scripts/gpu_bench.py"
    if [ "${1:-}" = --script ]; then
        script=${2:?--script needs a path}
        shift 2
    fi
    setup_loaders
    setup_icds
    use_stack
    if [ -n "${VLAEVAL_ASSET_DIR:-}" ]; then
        # A pack another tool downloads (YCB) is only checked, and reported as missing here.
        # From / so that -m finds the installed package, not this checkout's sources.
        (cd / && "$PYTHON" -m pytest_vlaeval install-assets) >&2 || say "some assets are missing (above)"
    fi
    say "python: $(command -v "$PYTHON")${PYTHONPATH:+ (PYTHONPATH=$PYTHONPATH)}"
    "$PYTHON" "$script" "$@"
}

main "$@"
