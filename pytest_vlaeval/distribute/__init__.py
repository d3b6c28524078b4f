"""Spreading episodes over xdist workers: the task-affinity scheduler and GPU placement."""
