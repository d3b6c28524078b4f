"""Episode videos (``--vla-video``): written for the failed or for every episode, named in their
records and attached to the JUnit XML."""

from __future__ import annotations

import pytest
from helpers import episode_records, run_dir

SHORT = ["--benchmark=fake.yaml:short"]


@pytest.mark.parametrize(("mode", "expected"), [("failed", "failures"), ("all", "every episode")])
def test_videos_for_failed_or_all_episodes_are_written_and_attached(
    fake: pytest.Pytester, mode: str, expected: str
) -> None:
    import cv2

    result = fake.runpytest(*SHORT, f"--vla-video={mode}", "--junitxml=report.xml")
    records = episode_records(run_dir(fake))
    wanted = {key for key, r in records.items() if mode == "all" or not r["success"]}
    videos = {(p.parent.name, int(p.stem)) for p in (run_dir(fake) / "videos").glob("*/*.webm")}
    assert videos == wanted, expected
    for (task, seed), record in records.items():
        assert (record["video"] is not None) == ((task, seed) in wanted)
    some = next(iter(wanted))
    capture = cv2.VideoCapture(records[some]["video"])
    frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    capture.release()
    assert frames == records[some]["length"] + 1  # one before every step, one after the last
    assert f'<property name="video" value="{records[some]["video"]}"' in (fake.path / "report.xml").read_text()
    result.stdout.fnmatch_lines(["*episode video*"])
