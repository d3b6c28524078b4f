#!/usr/bin/env bash
# What the Slurm tests (marker "slurm") need: Debian's slurm-wlm and munge. The tests start a
# one-node cluster of their own (munged, slurmctld, slurmd, state in a temporary directory), so
# nothing here is configured or started. Idempotent: installs only what is missing.
set -euo pipefail
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq slurm-wlm munge >/dev/null
fi
