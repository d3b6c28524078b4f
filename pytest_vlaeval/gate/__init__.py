"""The regression gate, no pytest here: ``protocol.Gate``, the one type every caller holds a gate
by, with its three kinds (``fixed.FixedGate``, ``sequential_gate.SequentialGate``,
``protocol.NoGate``); their ``settings``, the ``baseline`` they compare with, the ``methods`` that
bound a mean of per-seed values, the ``plan`` of what a budget can decide, and the ``verdict``."""
