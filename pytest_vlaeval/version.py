"""The package version, and a digest of the files that carry it, in a leaf module that any other
can import without a cycle (and that another interpreter runs to say which copy it holds)."""

from __future__ import annotations

import functools

__version__ = "0.2.0"
"""Changes with every release (docs/contributing.md)."""

RELOCATED_SUBPACKAGES = ("benchmarks",)
"""Subpackages whose source folder lies outside the package's (pyproject.toml's ``package-dir``):
an editable install imports them from there, a wheel holds them inside the package folder."""


@functools.cache
def package_digest() -> str:
    """SHA-256 over this package's installed sources and data files (path and bytes, in path order;
    compiled caches and hidden files left out), alike for a wheel and an editable install: two
    interpreters agree on it exactly when their workers would run the same code, which a version
    that is bumped per release cannot show. Read once per process."""
    import hashlib
    from importlib.util import find_spec
    from pathlib import Path

    folders = {"": Path(__file__).parent}
    for name in RELOCATED_SUBPACKAGES:
        spec = find_spec(f"{__package__}.{name}")
        if spec is not None and spec.submodule_search_locations:
            folders[f"{name}/"] = Path(next(iter(spec.submodule_search_locations)))
    files: dict[str, Path] = {}
    for prefix, folder in folders.items():
        for path in folder.rglob("*"):
            relative = path.relative_to(folder)
            hidden = any(part.startswith(".") or part == "__pycache__" for part in relative.parts)
            if path.is_file() and not hidden and path.suffix not in (".pyc", ".pyo"):
                files.setdefault(prefix + relative.as_posix(), path)
    digest = hashlib.sha256()
    for name in sorted(files):
        content = files[name].read_bytes()
        digest.update(f"{name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()
