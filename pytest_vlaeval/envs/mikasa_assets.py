"""MIKASA's data files that ManiSkill's own downloader fetches (its YCB pack): only checked, by the
benchmark file's ``external`` asset (``check: pytest_vlaeval.envs.mikasa_assets:asset_pack_problem``).

Imports ManiSkill only inside the check, so the asset check of another task costs nothing.
"""

from __future__ import annotations

from pathlib import Path

from pytest_vlaeval.benchmark.file import ExternalAsset


def asset_pack_problem(name: str, asset: ExternalAsset) -> str | None:
    """Why ManiSkill's asset pack ``asset.id`` is missing (one line naming its downloader), or None."""
    from mani_skill.utils import assets as ms_assets

    if asset.id not in ms_assets.DATA_SOURCES:
        return f"asset {name!r}: ManiSkill has no asset pack {asset.id!r} (its id)"
    if ms_assets.is_data_source_downloaded(asset.id):
        return None
    source = ms_assets.DATA_SOURCES[asset.id]
    where = Path(source.output_dir) / source.target_path
    return (
        f"ManiSkill asset pack {asset.id!r} not found at {where} (MS_ASSET_DIR chooses the root); "
        f"get it with `python -m mani_skill.utils.download_asset {asset.id}` ({asset.license})"
    )
