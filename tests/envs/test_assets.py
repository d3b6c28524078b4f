"""Data files a benchmark's wheel lacks (``assets``): installed from a folder or the pinned https URL,
verified, never overwritten silently; and, since a benchmark file may come from anyone, never
written outside their package, never found by importing anything, and never checked by code the
file names outside a session that runs its env factory."""

from __future__ import annotations

import hashlib
import http.server
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import assert_one_line_usage_error

from pytest_vlaeval.benchmark.file import ExternalAsset, PackageFileAsset
from pytest_vlaeval.benchmark.model import resolve_benchmark
from pytest_vlaeval.envs import assets
from pytest_vlaeval.install.assets_command import install_assets

PAYLOAD = b"mesh bytes"
VLAEVAL = Path(sys.executable).parent / "vlaeval"


def pinned(payload: bytes, **fields: str) -> PackageFileAsset:
    fields = {"package": "fakepkg", "path": "objects/bulb.glb"} | fields
    return PackageFileAsset(size=len(payload), sha256=hashlib.sha256(payload).hexdigest(), **fields)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on ``sys.path`` holding a fake installed package, ``fakepkg``."""
    folder = tmp_path / "site"
    (folder / "fakepkg").mkdir(parents=True)
    (folder / "fakepkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(folder))
    return folder


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A ``$VLAEVAL_ASSET_DIR`` holding the file."""
    folder = tmp_path / "source"
    folder.mkdir()
    (folder / "bulb.glb").write_bytes(PAYLOAD)
    return folder


def test_asset_install_from_a_folder_verifies_and_is_idempotent(site: Path, source: Path) -> None:
    asset = pinned(PAYLOAD)
    assert "is missing from" in assets.problem("bulb", asset)
    assert "installed" in assets.install_package_file("bulb", asset, source_dir=source)
    assert assets.problem("bulb", asset) is None
    assert (site / "fakepkg" / "objects" / "bulb.glb").read_bytes() == PAYLOAD
    assert "already installed" in assets.install_package_file("bulb", asset, source_dir=source)


def test_asset_install_rejects_wrong_bytes_and_never_overwrites_silently(site: Path, source: Path) -> None:
    asset = pinned(PAYLOAD)
    target = assets.package_file_path("bulb", asset)
    (source / "bulb.glb").write_bytes(b"tampered!!")
    with pytest.raises(RuntimeError, match="expected 10 bytes"):
        assets.install_package_file("bulb", asset, source_dir=source)
    assert not target.exists()
    target.parent.mkdir(parents=True)
    target.write_bytes(b"other file")
    assert "does not match its pinned SHA-256" in assets.problem("bulb", asset)
    with pytest.raises(RuntimeError, match="exists with different content; pass --force"):
        assets.install_package_file("bulb", asset, source_dir=source)


@pytest.fixture
def https(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real HTTPS server on loopback serving ``PAYLOAD`` at ``/bulb.glb`` and twice that at
    ``/long.glb``, with a certificate of its own that this process trusts (``SSL_CERT_FILE``)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    bodies = {"/bulb.glb": PAYLOAD, "/long.glb": PAYLOAD * 2}

    class Files(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = bodies[self.path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_asset_install_falls_back_to_the_pinned_url(site: Path, https: str, tmp_path: Path) -> None:
    asset = pinned(PAYLOAD, url=f"{https}/bulb.glb")
    message = assets.install_package_file("bulb", asset, source_dir=tmp_path / "empty")
    assert asset.url in message and assets.problem("bulb", asset) is None


def test_a_download_longer_than_pinned_stops_at_the_pinned_size(site: Path, https: str, tmp_path: Path) -> None:
    asset = pinned(PAYLOAD, url=f"{https}/long.glb")
    with pytest.raises(RuntimeError, match="sends more than the 10 bytes the benchmark file pins"):
        assets.install_package_file("bulb", asset, source_dir=tmp_path / "empty")
    assert not (site / "fakepkg" / "objects").exists()


def test_a_link_out_of_the_package_is_neither_read_nor_written_through(site: Path, source: Path) -> None:
    """A path the schema admits still leads out where a folder on it is a link: refused after resolving."""
    (site / "fakepkg" / "objects").symlink_to(site, target_is_directory=True)
    asset = pinned(PAYLOAD, path="objects/escaped.pth")
    (source / "escaped.pth").write_bytes(PAYLOAD)
    assert "outside package 'fakepkg'" in assets.problem("lamp", asset)
    with pytest.raises(RuntimeError, match=r"resolves to .*escaped\.pth, outside package 'fakepkg'"):
        assets.install_package_file("lamp", asset, source_dir=source)
    assert not (site / "escaped.pth").exists()


def test_a_link_at_the_target_is_replaced_not_written_through(site: Path, source: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"keep me")
    target = site / "fakepkg" / "objects" / "bulb.glb"
    target.parent.mkdir()
    target.symlink_to(site / "fakepkg" / "__init__.py")  # a link inside the package: allowed to replace
    assets.install_package_file("bulb", pinned(PAYLOAD), source_dir=source, force=True)
    assert not target.is_symlink() and target.read_bytes() == PAYLOAD
    assert (site / "fakepkg" / "__init__.py").read_text() == "" and outside.read_bytes() == b"keep me"


def test_a_module_or_an_absent_package_has_no_folder(site: Path) -> None:
    assert assets.package_folder("fakepkg") == site / "fakepkg"
    assert assets.package_folder("this") is None, "a module, not a package folder"
    assert assets.package_folder("__main__") is None
    assert assets.package_folder("no_such_package_here") is None


def test_a_check_runs_only_as_a_function_defined_in_the_module_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``toy_checks:rmtree`` is ``shutil.rmtree`` under another name: refused, the folder kept."""
    (tmp_path / "toy_checks.py").write_text(
        "from shutil import rmtree\n\ndef pack_problem(name, asset):\n    return f'{name}: get {asset.id}'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    reexported = ExternalAsset(check="toy_checks:rmtree")
    assert assets.problem("results", reexported) == (
        "asset 'results': its check toy_checks:rmtree is not a function defined in toy_checks"
    )
    assert (tmp_path / "results").is_dir()
    assert assets.problem("pack", ExternalAsset(check="toy_checks:pack_problem", id="ycb")) == "pack: get ycb"


@pytest.mark.mikasa
def test_the_builtin_ycb_check_says_how_to_get_the_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    from mani_skill.utils import assets as maniskill_assets

    mikasa, _ = resolve_benchmark("mikasa")
    monkeypatch.setattr(maniskill_assets, "is_data_source_downloaded", lambda asset_id: False)
    assert "python -m mani_skill.utils.download_asset ycb" in assets.problem("ycb", mikasa.assets["ycb"])
    assert install_assets(mikasa, None, False, check_only=True)[1].startswith("ycb: FAILED: ManiSkill asset pack")
    monkeypatch.setattr(maniskill_assets, "is_data_source_downloaded", lambda asset_id: True)
    assert assets.problem("ycb", mikasa.assets["ycb"]) is None


TOY = """\
name: toy
env: {{factory: "{factory}", action_dim: 2, policy_obs_keys: [pos]}}
assets:
  {asset}
tasks:
  - {{env_id: A-v0, split: short, max_steps: 5, assets: [{name}]}}
"""


def lamp(package: str, path: str, more: str = "") -> str:
    """A ``package_file`` asset of ``PAYLOAD``'s size and digest, as a benchmark file writes it."""
    digest = hashlib.sha256(PAYLOAD).hexdigest()
    return f"{{kind: package_file, package: '{package}', path: '{path}', {more}size: 10, sha256: {digest}}}"


def toy_file(folder: Path, name: str, asset: str, factory: str = "toy:make_env") -> Path:
    path = folder / "hostile.yaml"
    path.write_text(TOY.format(factory=factory, asset=f"{name}: {asset}", name=name))
    return path


def install_assets_command(folder: Path, benchmark: Path, site: Path, source: Path) -> tuple[int, list[str]]:
    """``vlaeval install-assets --benchmark FILE`` as a user runs it, in ``folder``, with the fake
    package importable and ``source`` as ``$VLAEVAL_ASSET_DIR``."""
    importable = os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))
    env = os.environ | {"PYTHONPATH": importable, "VLAEVAL_ASSET_DIR": str(source)}
    done = subprocess.run(
        [str(VLAEVAL), "install-assets", "--benchmark", str(benchmark)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, (done.stdout + done.stderr).splitlines()


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A results folder holding a run, what ``check: shutil:rmtree`` would delete."""
    run = tmp_path / "results" / "run"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    return tmp_path / "results"


def test_install_assets_never_calls_a_check_a_file_names_outside_the_factorys_package(
    tmp_path: Path, site: Path, source: Path, results: Path
) -> None:
    path = toy_file(tmp_path, "results", "{kind: external, check: 'shutil:rmtree'}")
    status, lines = install_assets_command(tmp_path, path, site, source)
    assert (results / "run" / "summary.json").is_file(), "the run is still there"
    assert status == 2 and len(lines) == 1, lines
    assert (
        str(path) in lines[0]
        and "assets.results.check 'shutil:rmtree' is outside the package of env.factory" in lines[0]
    )


def test_install_assets_never_calls_a_received_files_check_even_one_of_its_factorys_package(
    tmp_path: Path, site: Path, source: Path, results: Path
) -> None:
    """A file whose factory is itself ``shutil:rmtree`` passes the package rule; a session would run
    that factory anyway, but ``install-assets`` runs no code a received file names."""
    path = toy_file(tmp_path, "results", "{kind: external, check: 'shutil:rmtree'}", factory="shutil:rmtree")
    status, lines = install_assets_command(tmp_path, path, site, source)
    assert (results / "run" / "summary.json").is_file(), "the run is still there"
    assert status == 0 and lines == [
        "results: not checked: its check shutil:rmtree is code the benchmark file names, which only a session "
        "that runs the file's env.factory calls (a task that lists 'results' reports it missing)"
    ]


@pytest.mark.parametrize(
    ("asset_path", "url", "field"),
    [
        ("../escaped.pth", "", "assets.lamp.path"),
        ("{site}/escaped.pth", "", "assets.lamp.path"),
        ("data/escaped.pth", "url: 'file:///etc/hostname', ", "assets.lamp.url"),
    ],
)
def test_install_assets_writes_nothing_a_file_points_outside_or_at_a_local_url(
    asset_path: str, url: str, field: str, tmp_path: Path, site: Path, source: Path
) -> None:
    (source / "escaped.pth").write_bytes(PAYLOAD)
    path = toy_file(tmp_path, "lamp", lamp("fakepkg", asset_path.format(site=site), url))
    before = sorted(site.rglob("*"))
    status, lines = install_assets_command(tmp_path, path, site, source)
    assert sorted(site.rglob("*")) == before
    assert status == 2 and len(lines) == 1 and str(path) in lines[0] and f"- at `{field}`" in lines[0], lines


def test_install_assets_writes_nothing_through_a_link_out_of_the_package(
    tmp_path: Path, site: Path, source: Path
) -> None:
    (site / "fakepkg" / "objects").symlink_to(site, target_is_directory=True)
    (source / "escaped.pth").write_bytes(PAYLOAD)
    path = toy_file(tmp_path, "lamp", lamp("fakepkg", "objects/escaped.pth"))
    status, lines = install_assets_command(tmp_path, path, site, source)
    assert not (site / "escaped.pth").exists()
    assert (
        status == 1
        and len(lines) == 1
        and lines[0].startswith("lamp: FAILED: asset 'lamp': path objects/escaped.pth resolves")
    ), lines


def test_install_assets_imports_nothing_a_received_file_names(tmp_path: Path, site: Path, source: Path) -> None:
    """Its factory and its check name ``trap``, a module on the path that leaves a file when imported."""
    imported = tmp_path / "IMPORTED"
    (site / "trap.py").write_text(f"from pathlib import Path\nPath({str(imported)!r}).write_text('trap')\n")
    path = toy_file(tmp_path, "pack", "{kind: external, check: 'trap:check'}", factory="trap:make_env")
    status, lines = install_assets_command(tmp_path, path, site, source)
    assert status == 0 and len(lines) == 1 and lines[0].startswith("pack: not checked: "), lines
    assert not imported.exists(), "trap was imported"
    subprocess.run([sys.executable, "-c", "import trap"], env=os.environ | {"PYTHONPATH": str(site)}, check=True)
    assert imported.read_text() == "trap", "the trap was armed"


def test_install_assets_imports_nothing_to_find_a_package(tmp_path: Path, site: Path, source: Path) -> None:
    """Finding ``this.x`` would import ``this``, which prints the Zen of Python."""
    path = toy_file(tmp_path, "lamp", lamp("this.x", "x.bin"))
    status, lines = install_assets_command(tmp_path, path, site, source)
    assert not any("Zen of Python" in line for line in lines), "`this` was imported"
    assert status == 2 and len(lines) == 1 and "- at `assets.lamp.package`" in lines[0], lines


def test_a_session_refuses_a_check_outside_its_factorys_package_before_any_episode(fake: pytest.Pytester) -> None:
    text = (fake.path / "fake.yaml").read_text()
    text = text.replace("assets:\n", "assets:\n  results: {kind: external, check: 'shutil:rmtree'}\n", 1)
    fake.makefile(".yaml", hostile=text.replace("assets: [widget]", "assets: [results]"))
    (fake.path / "results" / "earlier").mkdir(parents=True)
    result = fake.runpytest("--benchmark=hostile.yaml:extra", "--episodes=1")
    assert_one_line_usage_error(result, "assets.results.check 'shutil:rmtree' is outside the package of env.factory")
    assert (fake.path / "results" / "earlier").is_dir()


def test_a_session_calls_the_check_of_its_factorys_package(fake: pytest.Pytester) -> None:
    """What keeps MIKASA's pack check working: a session, which runs the factory, runs its check."""
    fake.makepyfile(
        checked_env="from fake_env import make_env\n\n"
        "def pack_problem(name, asset):\n    return f'pack {asset.id!r} missing: get it with fetch-pack {asset.id}'\n"
    )
    text = (fake.path / "fake.yaml").read_text().replace("fake_env:make_env", "checked_env:make_env")
    text = text.replace(
        "assets:\n", "assets:\n  pack: {kind: external, check: 'checked_env:pack_problem', id: ycb}\n", 1
    )
    fake.makefile(".yaml", checked=text.replace("assets: [widget]", "assets: [pack]"))
    result = fake.runpytest("--benchmark=checked.yaml:extra", "--episodes=1", "-rA", "-vv", "-k", "NeedsWidget")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["ERROR *NeedsWidget-v0::100 - NeedsWidget-v0 cannot run: pack 'ycb' missing: get it with fetch-pack ycb"]
    )
