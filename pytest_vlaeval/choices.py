"""The choices of ``--vla-render``, ``--vla-video`` and ``--vla-live``: one owner, a leaf that
imports nothing, so ``plugin`` (which must stay light) and the modules acting on a choice share it."""

RENDER_BACKENDS = ("auto", "gpu", "gpu-render", "cpu")
"""``gpu``: simulate and render on the GPU; ``gpu-render``: simulate on the CPU, render on the GPU;
``cpu``: both on the CPU (software rendering); ``auto``: ``gpu`` when a CUDA device is present, else ``cpu``."""
VIDEO_MODES = ("none", "failed", "all")
LIVE_MODES = ("auto", "on", "off")
