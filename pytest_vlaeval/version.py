"""The package version, in a leaf module that any other can import without a cycle."""

__version__ = "0.1.0"
