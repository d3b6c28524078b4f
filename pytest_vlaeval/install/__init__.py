"""``vlaeval install``: a benchmark's simulator stack into the running interpreter, then a check."""
