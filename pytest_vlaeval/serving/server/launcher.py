"""Running a policy server as a child process: one per session that serves its policy.

The child binds a free loopback port and prints its address; the parent waits until
``/healthz`` says the policy is loaded. The child watches its standard input, so it stops with
its parent even when the parent dies without cleaning up.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_vlaeval.episodes.collect import RECORD_ATTR
from pytest_vlaeval.results.rundir import open_appending
from pytest_vlaeval.serving.process import stopped
from pytest_vlaeval.serving.url import SERVED_URL_KEY, TOKEN_ENV, served_url

if TYPE_CHECKING:
    from pytest_vlaeval.policy.sources import PolicySource

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerStartError(Exception):
    """The server exited, or did not become healthy in time; the message quotes its last error line."""


class ServerProcess:
    def __init__(
        self,
        spec: str,
        log_path: Path,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        python: Path | None = None,
    ) -> None:
        self.spec = spec
        self.python = str(python) if python is not None else sys.executable
        self.log_path = log_path
        self.args = list(args)
        self.env = env
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def health_url(self) -> str:
        return "http" + self.url.removeprefix("ws") + "/healthz"

    def start(self, timeout_s: float = 600.0) -> str:
        """Start the server and wait until its policy is loaded; returns its ``ws://`` address."""
        deadline = time.monotonic() + timeout_s
        command = [self.python, "-m", "pytest_vlaeval", "serve", "--policy", self.spec, "--host", "127.0.0.1"]
        with open_appending(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*command, "--port", "0", "--stop-on-stdin-eof", *self.args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.env,
            )
        # Reaps the child the moment it exits, so clients checking its pid see it gone.
        threading.Thread(target=self.proc.wait, name="vlaeval-server-reaper", daemon=True).start()
        self.url = self._read_address(deadline)
        while True:
            try:
                self.health()
                return self.url
            except (urllib.error.URLError, OSError):
                if self.proc.poll() is not None:
                    raise self._failure(f"the server exited with status {self.proc.returncode}") from None
                if time.monotonic() > deadline:
                    self.stop()
                    raise self._failure(f"the policy was not loaded within {timeout_s:g} s") from None
                time.sleep(0.1)

    def health(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """The server's ``/healthz`` counters (asked with its token, when it has one); raises
        ``URLError`` (HTTP 503) while it loads."""
        request = urllib.request.Request(self.health_url)
        token = (self.env if self.env is not None else os.environ).get(TOKEN_ENV)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        with _NO_PROXY.open(request, timeout=timeout_s) as response:
            return json.loads(response.read())

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """Close its standard input (it then stops by itself), else terminate, else kill."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            if stopped(proc.pid):
                os.kill(proc.pid, signal.SIGCONT)  # a stopped server cannot read the end of its input
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        return proc.returncode

    def _read_address(self, deadline: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(max(deadline - time.monotonic(), 0)):
                self.stop()
                raise self._failure("the server did not start listening")
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("ws://"):
            self.stop()
            raise self._failure(f"the server exited with status {self.proc.returncode}")
        return line

    def log_tail(self, count: int) -> list[str]:
        return self.log_path.read_text(errors="replace").strip().splitlines()[-count:] if self.log_path.exists() else []

    def _failure(self, what: str) -> ServerStartError:
        lines = self.log_tail(200)
        errors = [line for line in lines if " ERROR " in line] or lines
        return ServerStartError(f"{what}: {errors[-1] if errors else 'no log output'} (log: {self.log_path})")


def serve_session(
    config: pytest.Config, policy: PolicySource, log_path: Path, action_dim: int, python: Path | None = None
) -> str:
    """Start the session's server with a fresh token, for the benchmark's action dimension, in
    interpreter ``python`` (None: this one), stopped when the session ends; returns its address.

    The token travels in the environment, which the server and the xdist workers inherit.
    """
    previous = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = secrets.token_urlsafe(24)
    server = ServerProcess(policy.text, log_path, ["--action-dim", str(action_dim), *policy.server_args], python=python)

    def stop() -> None:
        server.stop()
        if previous is None:
            os.environ.pop(TOKEN_ENV, None)
        else:
            os.environ[TOKEN_ENV] = previous

    config.add_cleanup(stop)
    try:
        server.start()
    except ServerStartError as exc:
        raise pytest.UsageError(f"{policy.option} {policy.text}: {exc}") from None
    assert server.proc is not None
    session_server = _SessionServer(served_url(server.url, server.proc.pid), server, config)
    config.pluginmanager.register(session_server, "vlaeval-served-url")
    return session_server.url


class _SessionServer:
    """Hands the server's address to each xdist worker as it starts, and says once, as soon as a
    result shows it, that the server died or stopped answering (its episodes then fail fast: see
    ``server_pid``)."""

    LOG_TAIL = 5
    HEALTH_WAIT_S = 2.0
    """How long a server suspected of not answering gets to answer ``/healthz``."""

    def __init__(self, url: str, server: ServerProcess, config: pytest.Config) -> None:
        self.url = url
        self.server = server
        self.config = config
        self.announced = False

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[SERVED_URL_KEY] = self.url

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        proc = self.server.proc
        if self.announced or proc is None:
            return
        if proc.poll() is not None:
            self._announce(
                f"vlaeval: the policy server (process {proc.pid}) exited with status {proc.returncode} during the "
                f"session; its remaining episodes fail as errors. Last lines of {self.server.log_path}:",
                *(f"    {line}" for line in self.server.log_tail(self.LOG_TAIL) or ["(empty)"]),
            )
        elif self._blames_the_server(report) and (why := self._not_answering()):
            self._announce(
                f"vlaeval: the policy server (process {proc.pid}) stopped answering ({why}); "
                "its episodes fail as server errors until it answers again"
            )

    @staticmethod
    def _blames_the_server(report: pytest.TestReport) -> bool:
        attempts = getattr(report, RECORD_ATTR, None) or []
        return any(attempt.get("error_kind") == "server" for attempt in attempts)

    def _not_answering(self) -> str | None:
        """Why the running server does not answer, or None when its health check does."""
        assert self.server.proc is not None
        if stopped(self.server.proc.pid):
            return "its process is stopped: SIGSTOP or a debugger"
        try:
            self.server.health(self.HEALTH_WAIT_S)
        except (urllib.error.URLError, OSError) as exc:
            return f"no answer to {self.server.health_url} within {self.HEALTH_WAIT_S:g} s: {exc}"
        return None

    def _announce(self, *lines: str) -> None:
        self.announced = True
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            if reporter is not None:
                reporter.write_line(line, red=True)
            else:
                sys.stderr.write(line + "\n")
