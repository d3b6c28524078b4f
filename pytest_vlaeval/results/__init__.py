"""From records to verdicts: the episode record, the run's store and directory, the canonical
files and their schema, the interval statistics, the gates and the merge of shards."""
