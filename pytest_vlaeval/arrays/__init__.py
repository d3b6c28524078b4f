"""A run as an array of shards on a batch scheduler, and a merge after it.

Each array task runs ``pytest ARGS --vla-shard=auto --vla-rerun=incomplete`` and writes only its own
episode log into the run directory (a shared filesystem); a merge (``vlaeval merge RUN_DIR``) writes
the run's files once the array has ended. The run directory is the record of what finished:
``RUN_DIR/array/`` keeps what was submitted, the job ids and the scheduler's output.

``submission.py`` and ``command.py`` are the half every scheduler shares (what a submission
records and how it is sealed, the run a command line names, what a run still misses, the
subcommand's arguments and checks); ``slurm.py`` is Slurm's half, one ``ArrayScheduler``. Another
scheduler (a Kubernetes Indexed Job, whose ``JOB_COMPLETION_INDEX`` ``--vla-shard=auto`` already
reads) is one sibling file implementing it, and its line in ``cli.py``.
"""
