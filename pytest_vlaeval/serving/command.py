"""``vlaeval serve``: serve one policy to many episodes.

Prints its address (``ws://HOST:PORT``) on standard output once listening, then loads the
policy; ``/healthz`` answers 200 from then on. Logs go to standard error. SIGINT or SIGTERM
stop it; so does the end of standard input with ``--stop-on-stdin-eof``, which lets a
supervising process take the server down with it even if it dies abruptly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from pytest_vlaeval.errors import PolicyError, SpecError
from pytest_vlaeval.lerobot.checkpoint import LeRobotCheckpoint
from pytest_vlaeval.long_lived import built_for_life
from pytest_vlaeval.policy.builtins import BUILTIN_POLICIES
from pytest_vlaeval.policy.loading import parse_local_policy
from pytest_vlaeval.policy.sources import BENCHMARK_ENV_OPTION, PolicySource, register_policy_source, source_prefixes
from pytest_vlaeval.serving.server.connection import ServerConfig
from pytest_vlaeval.serving.server.logs import RepeatedLines
from pytest_vlaeval.serving.server.policy_server import PolicyServer
from pytest_vlaeval.serving.transports import PROTOCOLS
from pytest_vlaeval.serving.url import TOKEN_ENV, is_loopback

log = logging.getLogger("pytest_vlaeval.serving")

register_policy_source(LeRobotCheckpoint.PREFIX, LeRobotCheckpoint.parse)  # the package's policy sources

SETTINGS: dict[str, tuple[Any, str]] = {
    "host": (str, "address to bind [{}: this machine only]"),
    "port": (int, "port; 0 picks a free one [{}]"),
    "protocol": (str, "wire protocol [{}]"),
    "action_dim": (int, "action dimension D [{}]"),
    "max_batch_size": ("positive int", "1 is the exact mode [{}]"),
    "max_wait_ms": (float, "longest a request waits for batch mates [{}]"),
    "max_episodes": ("positive int", "episodes open at once [{}]"),
    "max_connections": ("positive int", "websocket connections open at once; more are refused [{}]"),
    "admission_timeout_s": ("positive float", "how long an open waits for a slot [{}]"),
    "idle_timeout_s": ("positive float", "close episodes idle this long [{}]"),
    "max_message_bytes": ("positive int", "largest accepted frame [{}]"),
}
"""``ServerConfig`` fields set from the command line (``--max-batch-size`` for ``max_batch_size``):
the value's kind and its help, ``{}`` standing for the default."""


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``vlaeval serve`` options; their defaults are ``ServerConfig``'s."""
    parser.add_argument(
        "--policy",
        required=True,
        help=f"module:attr (class or factory), a built-in: {', '.join(BUILTIN_POLICIES)}, or a policy source "
        f"by its prefix: {', '.join(f'{prefix}...' for prefix in source_prefixes())}",
    )
    parser.add_argument(
        BENCHMARK_ENV_OPTION,
        metavar="TYPE",
        help="the env type the benchmark is known by to a policy source that adapts to it (the session passes it)",
    )
    default = ServerConfig()  # the one owner of the server's defaults
    for name, (kind, meaning) in SETTINGS.items():
        value = getattr(default, name)
        shown = (
            f"{value // 2**20} MiB"
            if name == "max_message_bytes"
            else f"{value:g}"
            if isinstance(value, float)
            else value
        )
        options = {"choices": PROTOCOLS} if name == "protocol" else {"type": _checked(kind)}
        parser.add_argument(f"--{name.replace('_', '-')}", default=value, help=meaning.format(shown), **options)
    parser.add_argument("--token", default=os.environ.get(TOKEN_ENV), help=f"required token [${TOKEN_ENV}]")
    parser.add_argument(
        "--no-shared-memory",
        dest="shared_memory",
        action="store_false",
        help="clients on this machine send their arrays over the websocket too, not through shared memory",
    )
    parser.add_argument("--stop-on-stdin-eof", action="store_true", help="stop when standard input closes")


def run(args: argparse.Namespace) -> int:
    try:
        policy = parse_local_policy(args.policy, env_type=args.env_type)  # a server never proxies another
    except SpecError as exc:
        print(f"vlaeval serve: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s vlaeval serve %(levelname)s %(message)s")
    logging.getLogger("websockets").setLevel(logging.WARNING)  # one line per health check otherwise
    repeated = RepeatedLines()
    for handler in logging.getLogger().handlers:
        handler.addFilter(repeated)
    config = ServerConfig(
        **{name: getattr(args, name) for name in SETTINGS}, token=args.token or None, shared_memory=args.shared_memory
    )
    if not config.token and not is_loopback(config.host):
        log.warning("serving on %s without a token: anyone who can reach it can use the policy", config.host)
    try:
        return asyncio.run(_serve(policy, config, args.stop_on_stdin_eof))
    finally:
        repeated.report_held(log)


async def _serve(spec: PolicySource, config: ServerConfig, stop_on_stdin_eof: bool) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    if stop_on_stdin_eof:
        threading.Thread(target=_wait_for_stdin_eof, args=(loop, stop), daemon=True).start()

    server = PolicyServer(spec, config)
    try:
        await server.start()
    except OSError as exc:
        log.error("cannot listen on %s:%s: %s", config.host, config.port, exc)
        return 1
    print(server.url, flush=True)
    loading = asyncio.create_task(_load_for_life(server))
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if loading.done():
            loading.result()
            await stopping
    except (PolicyError, SpecError) as exc:
        log.error("cannot load policy %s: %s", spec.text, exc)
        return 1
    finally:
        loading.cancel()
        stopping.cancel()
        await server.stop()
    return 0


async def _load_for_life(server: PolicyServer) -> None:
    """The policy lives as long as this process, which is the server's own (``long_lived``); a
    server in a thread of the caller's process (``ServerThread``) leaves the caller's collector alone."""
    with built_for_life():
        await server.load()


def _wait_for_stdin_eof(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    # Raw reads: a thread blocked inside sys.stdin's buffer would hold its lock at interpreter exit.
    while os.read(sys.stdin.fileno(), 4096):
        pass
    loop.call_soon_threadsafe(stop.set)


def _checked(kind: Any) -> Callable[[str], Any]:
    """A converter for argparse: ``int``, ``str``, a ``float`` >= 0, or a "positive int|float" > 0."""
    if kind in (int, str):
        return kind
    positive = isinstance(kind, str)
    convert = int if kind == "positive int" else float

    def checked(text: str) -> Any:
        value = convert(text)
        if value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"must be {'positive' if positive else 'non-negative'}, got {text}")
        return value

    return checked
