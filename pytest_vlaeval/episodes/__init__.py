"""One episode on a worker: pytest items (``collect``), the runner that owns a worker's policy
and env, the canonical loop, the per-episode deadline and the episode video."""
