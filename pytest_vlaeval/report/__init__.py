"""What a person looks at, from the canonical records: the run's self-contained ``report.html``,
``report.md`` and ``summary.png``, runs compared across checkpoints (``compare``), and the one
writer of a run's derived files (``run_files``). The records in pytest-html's report are the
controller's (``controller/pytest_html_extras.py``)."""
