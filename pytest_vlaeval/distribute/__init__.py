"""Spreading episodes over xdist workers: the task-affinity scheduler and its variants (the gate's
seed blocks, whole tasks), lockstep groups sent whole, the worker backends and their lifecycle
(GPUs, an interpreter of their own, hosts, the watch that ends a frozen worker), and the shard a
session runs."""
