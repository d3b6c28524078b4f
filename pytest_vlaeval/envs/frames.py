"""An episode video's frame: the scene render beside the two policy cameras, as the benchmark's
own videos are laid out. Each adapter's ``render_frame`` composes its cameras with it."""

from __future__ import annotations

import numpy as np


def compose(general: np.ndarray, top: np.ndarray, wrist: np.ndarray) -> np.ndarray:
    """``[ scene | top over wrist ]``: the right column is half the scene's width."""
    import cv2

    height, width = general.shape[:2]
    side = max(1, width // 2)
    top_height = height // 2
    right = np.concatenate(
        [
            cv2.resize(np.ascontiguousarray(top), (side, top_height), interpolation=cv2.INTER_AREA),
            cv2.resize(np.ascontiguousarray(wrist), (side, height - top_height), interpolation=cv2.INTER_AREA),
        ]
    )
    return np.ascontiguousarray(np.concatenate([general, right], axis=1))
