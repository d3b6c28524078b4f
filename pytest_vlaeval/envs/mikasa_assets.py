"""MIKASA's data files that ManiSkill's own downloader fetches (its YCB pack): only checked, by the
benchmark file's ``external`` asset (``check: pytest_vlaeval.envs.mikasa_assets:asset_pack_problem``).

Imports ManiSkill only inside the check, so the asset check of another task costs nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def asset_pack_problem(name: str, spec: dict[str, Any]) -> str | None:
    """Why ManiSkill's asset pack ``spec['id']`` is missing (one line naming its downloader), or None."""
    from mani_skill.utils import assets as ms_assets

    if ms_assets.is_data_source_downloaded(spec["id"]):
        return None
    source = ms_assets.DATA_SOURCES[spec["id"]]
    where = Path(source.output_dir) / source.target_path
    return (
        f"ManiSkill asset pack {spec['id']!r} not found at {where} (MS_ASSET_DIR chooses the root); "
        f"get it with `python -m mani_skill.utils.download_asset {spec['id']}` ({spec.get('license', '')})"
    )
