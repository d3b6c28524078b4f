"""``vla-eval://HOST:PORT``: a policy behind a vla-eval model server (protocol version 1).

vla-eval's protocol has episode boundaries: ``reset`` sends ``episode_start`` with the task (the
server resets that episode's state), each ``act`` one ``observation`` answered by one ``action``,
and the episode loop's ``end_episode`` sends ``episode_end`` with the episode's metrics. A reply
may be one action or a chunk; a server that splits chunks itself answers one action per
observation, and then one is executed per step. ``?chunk_size=K`` executes at most K actions of
a reply. An ``error`` frame is a ``PolicyError``; what goes wrong between us and the server is a
``ServerError``: both make the episode an error, never a failure. A server of ours on this machine
says so in its hello's capabilities (``shared_memory``): a second hello then attaches a
shared-memory segment for the observations' arrays.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np

from pytest_vlaeval.errors import PolicyError, ServerError
from pytest_vlaeval.policy.contract import EpisodeInfo
from pytest_vlaeval.serving.client.policies import MAX_REPLY_BYTES, RemoteClient
from pytest_vlaeval.serving.url import RemoteSpec
from pytest_vlaeval.serving.wire import vla_eval as wire
from pytest_vlaeval.serving.wire.native import ProtocolError
from pytest_vlaeval.version import __version__


class VlaEvalPolicy(RemoteClient):
    def __init__(self, remote: RemoteSpec, action_dim: int, benchmark: str = "") -> None:
        super().__init__(remote, action_dim, "Bearer", benchmark)
        self._seq = 0
        self._started: float | None = None
        """When the open episode started (None: no episode open on the server)."""
        self.server_info = self._connect()
        self.image_format = self._image_format(self.server_info)
        # Chunks are as long as the server makes them; K only bounds what is executed.
        self.chunk_size = remote.chunk_size or 1
        self.name = str(self.server_info.get("model_server") or "vla-eval")
        self.config = {  # where it is served is no part of the policy's identity (``?identity=``)
            "protocol": "vla-eval",
            "chunk_size": remote.chunk_size,
            **{
                key: self.server_info[key]
                for key in ("harness_version", "capabilities", "action_spec")
                if key in self.server_info
            },
        }

    def reset(self, episode: EpisodeInfo) -> None:
        self._end({"aborted": True})  # the previous episode ended in an error: its state is freed all the same
        if not self.link.connected:
            info = self._connect()
            if info.get("model_server") != self.server_info.get("model_server"):
                self.link.close()
                raise ServerError(f"the server at {self.remote.url} now serves another model than when this run began")
        task = {"env_id": episode.task, "name": episode.task, "benchmark": self.benchmark, **episode.to_dict()}
        self.link.send(self._frame("episode_start", {"task": task}))
        self._started = time.monotonic()

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        if self._started is None:
            raise ServerError("no episode open on the server (reset() failed or the connection was lost)")
        seq = self._seq + 1
        try:
            observation, _ = self.link.outgoing(wire.to_wire_observation(self.numpy_obs(obs), self.image_format))
            frame = self._frame("observation", observation)
        except TypeError as exc:
            raise PolicyError(f"cannot send this observation to a vla-eval server: {exc}") from None
        kind, payload, reply_seq = self._parse(self.link.exchange(frame, self.remote.timeout_s))
        if kind == "error":
            if reply_seq != seq:  # about an earlier frame (a failed episode_start): our reply is still coming
                self._drop()
            raise PolicyError(f"served {payload.get('error', 'error without a message')}")
        if kind != "action" or reply_seq != seq:
            self._drop()
            raise ServerError(f"out of protocol: expected the action for observation {seq}, got {kind!r} {reply_seq}")
        actions = payload.get("actions")
        if not isinstance(actions, np.ndarray):
            raise ServerError(f"the vla-eval server's action has no 'actions' array (keys: {sorted(payload)})")
        if actions.ndim == 2:
            if self.remote.chunk_size:
                actions = actions[: self.remote.chunk_size]
            self.chunk_size = max(self.chunk_size, len(actions))
        return actions

    def end_episode(self, result: Any) -> None:
        """Tell the server the episode is over, with its metrics; never fails the finished episode."""
        self._end(
            {
                "metrics": {"success": result.success, "episode_return": result.episode_return},
                "steps": result.length,
            }
        )

    def close(self) -> None:
        self._end({"aborted": True})
        super().close()

    def _end(self, result: dict[str, Any]) -> None:
        started, self._started = self._started, None
        if started is not None and self.link.connected:
            with contextlib.suppress(ServerError):  # then the link is dropped, which ends the episode too
                self.link.send(
                    self._frame("episode_end", {**result, "elapsed_sec": round(time.monotonic() - started, 3)})
                )

    def _connect(self) -> dict[str, Any]:
        hello = wire.hello_payload(f"pytest-vlaeval {__version__}", benchmark=self.benchmark)
        try:
            kind, payload, _ = wire.unpack_frame(self.link.connect(self._frame("hello", hello)), MAX_REPLY_BYTES)
        except ProtocolError as exc:
            self._drop()
            raise ServerError(
                f"{self.remote.url} is not a vla-eval model server ({exc}); for a vlaeval server use ws://"
            ) from None
        if kind != "hello":
            self._drop()
            detail = payload.get("error", kind)
            raise ServerError(f"{self.remote.url} answered the hello with {detail!r}")
        version = wire.other_version(payload)
        if version is not None:
            self._drop()
            raise ServerError(
                f"{self.remote.url} speaks vla-eval protocol version {version}; this client speaks version {wire.VERSION}"
            )
        capabilities = payload.get("capabilities")
        if isinstance(capabilities, dict) and capabilities.get("shared_memory") is True:  # ours
            self.link.share_memory(self._attach)
        return payload

    def _attach(self, request: dict[str, Any]) -> bool:
        hello = wire.hello_payload(f"pytest-vlaeval {__version__}", benchmark=self.benchmark, shared_memory=request)
        kind, payload, _ = self._parse(self.link.exchange(self._frame("hello", hello), self.remote.timeout_s))
        return kind == "hello" and payload.get("attached") == request["segment"]

    def _image_format(self, info: dict[str, Any]) -> str:
        params = info.get("observation_params") or {}
        image_format = params.get("image_format", "raw") if isinstance(params, dict) else "raw"
        if image_format not in wire.IMAGE_FORMATS:
            self._drop()
            raise ServerError(
                f"the vla-eval server at {self.remote.url} asks for image format {image_format!r}; "
                f"supported: {', '.join(wire.IMAGE_FORMATS)}"
            )
        return image_format

    def _frame(self, kind: str, payload: dict[str, Any]) -> bytes:
        self._seq += 1
        return wire.pack_frame(kind, payload, self._seq)

    def _parse(self, frame: bytes | str) -> tuple[str, dict[str, Any], int]:
        try:
            return wire.unpack_frame(frame, MAX_REPLY_BYTES)
        except ProtocolError as exc:
            self._drop()
            raise ServerError(f"bad reply from {self.remote.url}: {exc}") from None

    def _drop(self) -> None:
        """Close the connection (the server then ends its episode); the next ``reset`` reconnects."""
        self._started = None
        self.link.close()
