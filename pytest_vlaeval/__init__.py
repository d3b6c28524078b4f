"""pytest-vlaeval: evaluate Vision-Language-Action policies on simulation benchmarks with pytest."""

__version__ = "0.1.0"
