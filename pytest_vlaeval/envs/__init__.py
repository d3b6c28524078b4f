"""Benchmark env adapters (one module per simulator stack), their render backends and data files.

An adapter is named by a benchmark file's ``env.factory`` (``module:make_env``) and drives the
plain-Python step interface that ``episodes.loop`` expects; copy ``pusht.py``, the smallest.
"""
