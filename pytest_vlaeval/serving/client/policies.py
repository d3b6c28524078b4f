"""The plugin side of serving: a policy that lives in a server, behind the ``Policy`` interface.

``ws://`` speaks this package's protocol: each episode is opened on the server (its state reset
there), stepped, and closed when it ends (or, after an error, when the next one starts).
``openpi://`` speaks openpi's protocol, which has no episode boundary; ``vla-eval://`` speaks
vla-eval's (see ``vla_eval.py``). Whatever goes wrong between the evaluation and the
server (unreachable, timeout, dropped connection, refused request) is a ``ServerError``; a fault
the server reports from the policy itself is a ``PolicyError``. Both make the episode an error,
never a failure. A client of one of our own servers on this machine sends its observations'
arrays through shared memory (``wire/shared_frames.py``), whatever the protocol.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from pytest_vlaeval.errors import PolicyError, ServerError
from pytest_vlaeval.policy.contract import EpisodeInfo, to_numpy
from pytest_vlaeval.serving.process import running, stopped
from pytest_vlaeval.serving.url import TOKEN_ENV, RemoteSpec
from pytest_vlaeval.serving.wire import native as protocol
from pytest_vlaeval.serving.wire.shared_frames import SegmentWriter
from pytest_vlaeval.version import __version__

WIRE_LOG = logging.getLogger("pytest_vlaeval.serving.wire")
"""The websockets client's own logger: silent, so a lost connection is one episode error, not
a traceback from its keepalive thread in the session's output."""
WIRE_LOG.addHandler(logging.NullHandler())
WIRE_LOG.propagate = False

STOPPED_CHECK_S = 2.0
"""While a reply is awaited, how often a server whose process is known is checked for being stopped."""

MAX_REPLY_BYTES = 16 * 2**20
BACKOFF_S = (0.05, 2.0)
"""First and longest pause between connection attempts (doubling in between)."""


class RemoteTraceback(Exception):
    """The traceback a server reported for a policy fault, shown under the episode error."""


class Link:
    """One websocket to a server: connects with backoff, then exchanges one frame for one reply."""

    def __init__(self, remote: RemoteSpec, auth_scheme: str) -> None:
        self.remote = remote
        token = os.environ.get(TOKEN_ENV)
        self._headers = {"Authorization": f"{auth_scheme} {token}"} if token else None
        self._ws: ClientConnection | None = None
        self._segment: SegmentWriter | None = None
        """This connection's shared-memory segment, once the server holds it."""

    @property
    def connected(self) -> bool:
        return self._ws is not None

    def connect(self, greeting: bytes | None = None) -> bytes | str:
        """Connect, retrying with backoff for ``connect_timeout``; returns the server's first frame
        (the reply to ``greeting`` for protocols where the client speaks first)."""
        url = self.remote.url
        deadline = time.monotonic() + self.remote.connect_timeout_s
        pause = BACKOFF_S[0]
        while True:
            self._check_not_stopped()
            remaining = deadline - time.monotonic()
            try:
                connection = connect(
                    url,
                    compression=None,
                    max_size=MAX_REPLY_BYTES,
                    open_timeout=max(min(remaining, 10.0), 0.1),
                    proxy=None,
                    additional_headers=self._headers,
                    user_agent_header=f"pytest-vlaeval/{__version__}",
                    logger=WIRE_LOG,
                )
                ws = connection.__enter__()  # it outlives this call: close() exits it
                try:
                    if greeting is not None:
                        ws.send(greeting)
                    first = ws.recv(timeout=max(remaining, 0.1))
                except BaseException:
                    ws.close()
                    raise
                self._ws = ws
                return first
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status == 401:
                    hint = f"set {TOKEN_ENV} to the server's token" if not self._headers else f"{TOKEN_ENV} is wrong"
                    raise ServerError(f"{url} refused the connection: HTTP 401 ({hint})") from None
                reason = f"HTTP {status}" + (" (the policy is still loading)" if status == 503 else "")
            except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            pid = self.remote.server_pid
            if pid is not None and not running(pid):
                raise ServerError(f"the policy server at {url} (process {pid}) is no longer running: {reason}")
            if time.monotonic() + pause > deadline:
                raise ServerError(
                    f"cannot reach the policy server at {url} (kept trying for {self.remote.connect_timeout_s:g} s): {reason}"
                )
            time.sleep(pause)
            pause = min(pause * 2, BACKOFF_S[1])

    def send(self, frame: bytes) -> None:
        """Send one frame; a failure drops the connection."""
        if self._ws is None:
            raise ServerError(f"not connected to {self.remote.url} (the connection was lost earlier)")
        try:
            self._ws.send(frame)
        except ConnectionClosed as exc:
            self.close()
            raise ServerError(f"lost the connection to {self.remote.url}: {exc}") from None

    def exchange(self, frame: bytes, timeout_s: float) -> bytes | str:
        """Send one frame and wait for one reply; any failure drops the connection."""
        self.send(frame)
        assert self._ws is not None
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self._ws.recv(timeout=min(remaining, STOPPED_CHECK_S) if self.remote.server_pid else remaining)
            except TimeoutError:
                if time.monotonic() < deadline:
                    self._check_not_stopped()
                    continue
                self.close()
                raise ServerError(f"no reply from {self.remote.url} within {timeout_s:g} s") from None
            except ConnectionClosed as exc:
                self.close()
                raise ServerError(f"lost the connection to {self.remote.url}: {exc}") from None

    def share_memory(self, attach: Callable[[dict[str, Any]], bool]) -> None:
        """Offer a server that takes shared memory a segment for this connection's arrays:
        ``attach(request)`` sends the protocol's attach request and says whether the server holds
        it. Nothing changes for a server elsewhere, where no segment can be made, or when it declines."""
        if not self.remote.on_loopback or (segment := SegmentWriter.create()) is None:
            return
        try:
            held = attach(segment.request)
        except BaseException:
            segment.close()
            raise
        segment.unlink()  # the server's descriptor and ours hold it from now on; a kill leaks nothing
        if held:
            self._segment = segment
        else:
            segment.close()

    def outgoing(self, value: Any) -> tuple[Any, int]:
        """``value`` as it is sent: its arrays in the shared segment where there is one, with the
        bytes put there (which count against the server's frame limit as on the wire)."""
        if self._segment is None:
            return value, 0
        try:
            return self._segment.place(value)
        except OSError:  # no room left in shared memory: this connection's arrays go on the wire
            self._drop_segment()
            return value, 0

    def _drop_segment(self) -> None:
        segment, self._segment = self._segment, None
        if segment is not None:
            segment.close()

    def _check_not_stopped(self) -> None:
        """Fail at once when the server's process is stopped: nothing will answer until it continues."""
        pid = self.remote.server_pid
        if pid is not None and stopped(pid):
            self.close()
            raise ServerError(
                f"the policy server at {self.remote.url} (process {pid}) is stopped (SIGSTOP or a debugger) "
                "and answers nothing until it continues"
            )

    def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.close()
        self._drop_segment()


class RemoteClient:
    """What both protocols share: a link closed with the process, numpy observations."""

    chunk_size: int

    def __init__(self, remote: RemoteSpec, action_dim: int, auth_scheme: str, benchmark: str) -> None:
        self.remote = remote
        self.action_dim = action_dim
        self.benchmark = benchmark
        """The benchmark its episodes come from, for protocols that name it to the server."""
        self.link = Link(remote, auth_scheme)
        weakref.finalize(self, self.link.close)  # a clean close frame, also at interpreter exit

    def close(self) -> None:
        self.link.close()

    @staticmethod
    def numpy_obs(obs: dict[str, Any]) -> dict[str, Any]:
        """Tensors become numpy arrays (the wire carries numpy); strings and numbers pass as they are."""
        return {key: to_numpy(value) for key, value in obs.items()}


class RemotePolicy(RemoteClient):
    """A policy served over this package's protocol, one server-side episode per ``reset``."""

    def __init__(self, remote: RemoteSpec, action_dim: int, benchmark: str = "") -> None:
        super().__init__(remote, action_dim, "Bearer", benchmark)
        self._episode: str | None = None
        self._step = 0
        self.metadata = self._connect()
        self.chunk_size = self.metadata["chunk_size"]
        model = self.metadata.get("model") or {}
        self.name = str(model.get("name", remote.url))
        self.config = model.get("config") or {}  # where it is served is no part of the policy's identity

    def reset(self, episode: EpisodeInfo) -> None:
        self._close_episode()
        if not self.link.connected:
            metadata = self._connect()
            if (metadata["chunk_size"], metadata.get("model")) != (self.chunk_size, self.metadata.get("model")):
                self.link.close()
                raise ServerError(f"the server at {self.remote.url} now serves another policy than when this run began")
        episode_id = uuid.uuid4().hex
        wait_s = float(self.metadata.get("admission_timeout_s", 0)) + self.remote.timeout_s
        self._request({"type": "open", "episode": episode_id, **episode.to_dict()}, "opened", episode_id, wait_s)
        self._episode, self._step = episode_id, 0

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        if self._episode is None:
            raise ServerError("no open episode on the server (reset() failed or the connection was lost)")
        view, shared_bytes = self.link.outgoing(self.numpy_obs(obs))
        message = {"type": "act", "episode": self._episode, "step": self._step, "obs": view}
        reply = self._request(message, "actions", self._episode, self.remote.timeout_s, shared_bytes)
        if reply["step"] != self._step:
            self.link.close()
            raise ServerError(f"out of protocol: the server answered step {reply['step']} to step {self._step}")
        actions = reply["actions"]
        self._step += len(actions) if actions.ndim > 1 else 1
        return actions

    def end_episode(self, result: Any) -> None:
        """Close the episode on the server now, freeing its slot for another worker's episode."""
        self._close_episode()

    def close(self) -> None:
        self._close_episode()
        super().close()

    def _connect(self) -> dict[str, Any]:
        first = self.link.connect()
        try:
            _, metadata = protocol.parse(first, {"metadata": protocol.REPLY_FIELDS["metadata"]})
        except protocol.ProtocolError as exc:
            self.link.close()
            raise ServerError(
                f"{self.remote.url} is not a vlaeval policy server ({exc}); for an openpi server use openpi://"
            ) from None
        if (metadata["protocol"], metadata["version"]) != (protocol.PROTOCOL, protocol.VERSION):
            self.link.close()
            raise ServerError(
                f"{self.remote.url} speaks {metadata['protocol']} version {metadata['version']}; "
                f"this client speaks {protocol.PROTOCOL} version {protocol.VERSION}"
            )
        if metadata["action_dim"] != self.action_dim:
            self.link.close()
            raise PolicyError(
                f"the policy at {self.remote.url} returns {metadata['action_dim']}-dim actions; "
                f"this benchmark needs {self.action_dim}"
            )
        if metadata.get("shared_memory") is True:
            self.link.share_memory(self._attach)
        return metadata

    def _attach(self, request: dict[str, Any]) -> bool:
        reply = self.link.exchange(protocol.pack({"type": "attach", **request}), self.remote.timeout_s)
        try:
            kind, body = protocol.parse(reply, protocol.REPLY_FIELDS)
        except protocol.ProtocolError as exc:
            self.link.close()
            raise ServerError(f"bad reply from {self.remote.url}: {exc}") from None
        return kind == "attached" and body["segment"] == request["segment"]

    def _close_episode(self) -> None:
        episode_id, self._episode = self._episode, None
        if episode_id is not None and self.link.connected:
            with contextlib.suppress(ServerError):  # then the link is dropped, which frees the episode too
                self._request({"type": "close", "episode": episode_id}, "closed", episode_id, self.remote.timeout_s)

    def _request(
        self, message: dict[str, Any], expected: str, episode_id: str, timeout_s: float, shared_bytes: int = 0
    ) -> dict[str, Any]:
        frame = protocol.pack(message)
        limit = self.metadata["max_message_bytes"]
        if len(frame) + shared_bytes > limit:
            raise ServerError(
                f"the {message['type']} message of {len(frame) + shared_bytes} bytes exceeds the server's limit of {limit}"
            )
        reply = self.link.exchange(frame, timeout_s)
        try:
            kind, body = protocol.parse(reply, protocol.REPLY_FIELDS)
        except protocol.ProtocolError as exc:
            self.link.close()
            raise ServerError(f"bad reply from {self.remote.url}: {exc}") from None
        if kind == "error":
            if body["code"] == protocol.POLICY:
                detail = body.get("detail")
                raise PolicyError(f"served {body['message']}") from RemoteTraceback(detail) if detail else None
            raise ServerError(f"the policy server refused {message['type']}: {body['message']} ({body['code']})")
        if kind != expected or body["episode"] != episode_id:
            self.link.close()
            raise ServerError(f"out of protocol: expected {expected!r} for episode {episode_id}, got {kind!r}")
        return body


class OpenpiPolicy(RemoteClient):
    """A policy behind an openpi server. That protocol has no episode boundary: the server sees
    a stream of observations, so only stateless policies are evaluated correctly this way."""

    def __init__(self, remote: RemoteSpec, action_dim: int, benchmark: str = "") -> None:
        super().__init__(remote, action_dim, "Api-Key", benchmark)
        self.metadata = self._connect()
        chunk_size = remote.chunk_size or self.metadata.get("chunk_size")
        if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
            self.link.close()
            raise PolicyError(
                f"the openpi server at {remote.url} does not say how many actions to execute per inference; "
                f"add ?chunk_size=K to the spec"
            )
        self.chunk_size = chunk_size
        model = self.metadata.get("model")
        self.name = str(model.get("name")) if isinstance(model, dict) and "name" in model else "openpi"
        self.config = {"protocol": "openpi", "chunk_size": chunk_size}

    def reset(self, episode: EpisodeInfo) -> None:
        if not self.link.connected:
            self._connect()

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        view = self.numpy_obs(obs)
        view["prompt"] = view.pop("instruction", "")
        view, _ = self.link.outgoing(view)
        reply = self.link.exchange(protocol.pack(view), self.remote.timeout_s)
        if isinstance(reply, str):  # openpi's way of reporting a failed inference
            self.link.close()  # openpi servers close the connection after one; reconnect next episode
            last = reply.strip().splitlines()[-1] if reply.strip() else "no detail"
            raise PolicyError(f"the openpi server failed: {last}") from RemoteTraceback(reply)
        try:
            body = protocol.unpack(reply)
        except protocol.ProtocolError as exc:
            self.link.close()
            raise ServerError(f"bad reply from {self.remote.url}: {exc}") from None
        actions = body.get("actions")
        if not isinstance(actions, np.ndarray):
            raise ServerError(f"the openpi server's reply has no 'actions' array (keys: {sorted(body)})")
        # openpi servers return their whole horizon; the first chunk_size actions are executed.
        return actions[: self.chunk_size] if actions.ndim == 2 else actions

    def _connect(self) -> dict[str, Any]:
        first = self.link.connect()
        try:
            metadata = protocol.unpack(first)
        except protocol.ProtocolError as exc:
            self.link.close()
            raise ServerError(f"{self.remote.url} sent no openpi metadata: {exc}") from None
        if metadata.get("shared_memory") is True:  # ours: openpi's own servers say nothing of it
            self.link.share_memory(self._attach)
        return metadata

    def _attach(self, request: dict[str, Any]) -> bool:
        reply = self.link.exchange(protocol.pack({protocol.OPENPI_ATTACH: request}), self.remote.timeout_s)
        if isinstance(reply, str):
            return False
        try:
            return protocol.unpack(reply).get("attached") == request["segment"]
        except protocol.ProtocolError as exc:
            self.link.close()
            raise ServerError(f"bad reply from {self.remote.url}: {exc}") from None
