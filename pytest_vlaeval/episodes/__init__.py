"""One episode on a worker: pytest items (``collect``), what a worker keeps (``worker``), the
execution modes that turn episodes into records (``runner`` and one file each), the canonical
loop, the per-episode deadline and the episode video."""
