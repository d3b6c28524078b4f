"""From records to verdicts: the episode record, the run's store and directory, the canonical
files and their schema, and the merge of shards (the gate is in ``gate``)."""
