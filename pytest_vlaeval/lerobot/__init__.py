"""LeRobot in one place: its checkpoints as a policy source (``lerobot:PATH``), checked where the
session starts without LeRobot and run in LeRobot's own interpreter as ``lerobot-eval`` runs them,
and the set-up its LIBERO env needs there; and its ``eval_info.json`` format (``eval_info``), which
every run writes and the gate and ``vlaeval compare`` read.

The composition roots (``configure``, ``vlaeval serve``) register the source's prefix; nothing
generic names LeRobot's policy source.
"""
