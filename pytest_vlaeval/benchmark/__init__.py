"""What a benchmark is: its file read once into typed values (``file``) and the model the rest of
the package reads (``model``: tasks, splits, axes, the seed rule, the env's settings)."""
