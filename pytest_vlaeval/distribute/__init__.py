"""Spreading episodes over xdist workers: the task-affinity scheduler, where workers run (GPUs, an
interpreter of their own, hosts), lockstep and gate blocks, and the shard a session runs."""
