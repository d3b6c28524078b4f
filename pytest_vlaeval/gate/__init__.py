"""The regression gate: baselines, the fixed and the sequential test, their verdicts (no pytest here)."""
