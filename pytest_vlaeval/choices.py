"""The choices of ``--vla-render``, ``--vla-video`` and ``--vla-live``: one owner, a leaf that
imports nothing, so ``plugin`` (which must stay light) and the modules acting on a choice share it."""

RENDER_BACKENDS = ("auto", "gpu", "cpu")
VIDEO_MODES = ("none", "failed", "all")
LIVE_MODES = ("auto", "on", "off")
