#!/usr/bin/env bash
# What the cluster tests need: Debian's slurm-wlm and munge (marker "slurm": a one-node Slurm
# cluster) and openssh-server (marker "ssh": xdist workers over ssh on loopback). The tests start
# their own daemons, with every file in a temporary directory, so nothing here is configured or
# started. Idempotent: installs only what is missing.
set -euo pipefail
missing=()
command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
