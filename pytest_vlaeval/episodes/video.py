"""Episode videos (``--vla-video``): frames composed by ``envs.frames``, one frame
before every step and one after the last, as the benchmark's own videos are laid out.

Frames are taken from the env adapter's ``render_frame(obs)``; recording only reads the
renderer, so it never changes an episode's result (the tests check this on real episodes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pytest_vlaeval.envs.adapter import EnvAdapter

FPS = 30


class EpisodeVideo:
    def __init__(self, env: EnvAdapter) -> None:
        self.render_frame = env.render_frame
        self.frames: list[np.ndarray] = []

    def capture(self, obs: dict[str, Any]) -> None:
        frame = self.render_frame(obs)
        if frame is not None:
            self.frames.append(frame)

    def write(self, path: Path) -> Path | None:
        """Write a WebM (VP8, which browsers play inline, so ``report.html`` can show it; OpenCV's
        mp4v is not); None when the env gave no frames."""
        if not self.frames:
            return None
        import cv2

        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # a link there (a received run's) is removed, never written through
        height, width = self.frames[0].shape[:2]
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"VP80"), FPS, (width, height))
        try:
            for frame in self.frames:
                writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
        finally:
            writer.release()
        return path
