"""From records to verdicts: the episode record, the run's store and directory, the canonical
files (their records are typed in ``schema``, a leaf every floor reads; merging shards is ``merge``,
the gate is ``gate``)."""
