"""What a person looks at: the run's self-contained ``report.html``, runs compared across
checkpoints (``compare``), and the episodes' records in pytest-html's report."""
