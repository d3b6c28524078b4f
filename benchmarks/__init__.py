"""Built-in benchmark definitions (YAML), installed as ``pytest_vlaeval.benchmarks``."""
