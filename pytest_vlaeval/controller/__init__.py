"""The controlling process: the pytest plugin that takes records off reports, the bookkeeping
ledger behind it, the live progress, the terminal and markdown reports."""
