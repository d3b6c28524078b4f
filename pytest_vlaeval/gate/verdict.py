"""A gate's verdicts and exit status, shared by the fixed and the sequential gate and their reports."""

EXIT_GATE_FAILED = 6
"""Exit status of a session whose success rate regressed past the gate (pytest uses 0-5)."""

PASS, FAIL, UNDECIDED = "PASS", "FAIL", "UNDECIDED"
"""A gate's verdicts; UNDECIDED only from the sequential gate, when its budget ran out first."""

VERDICT_PREFIX = "vlaeval gate"
"""Every gate's verdict line starts ``vlaeval gate: PASS|FAIL|UNDECIDED: ``, for CI logs to grep."""
