"""Spreading episodes over xdist workers: the task-affinity scheduler and its variants (the gate's
seed blocks, whole tasks), lockstep groups sent whole, the worker backends and their lifecycle
(GPUs, an interpreter of their own, hosts), and the shard a session runs."""
