"""The controlling process: the pytest plugin that takes records off reports and stores, judges and
reports them, the bookkeeping ledger behind it, the live progress and the terminal summary (the
report files themselves are ``report/``'s; the workers' lifecycle is ``distribute/``'s)."""
