"""``vlaeval-serve`` (also ``python -m pytest_vlaeval.serve``): serve one policy to many episodes.

Prints its address (``ws://HOST:PORT``) on standard output once listening, then loads the
policy; ``/healthz`` answers 200 from then on. Logs go to standard error. SIGINT or SIGTERM
stop it; so does the end of standard input with ``--stop-on-stdin-eof``, which lets a
supervising process take the server down with it even if it dies abruptly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from pytest_vlaeval.errors import PolicyError, SpecError
from pytest_vlaeval.policy.loading import local_reference
from pytest_vlaeval.serving.connection import PROTOCOLS, ServerConfig
from pytest_vlaeval.serving.server import PolicyServer
from pytest_vlaeval.serving.url import TOKEN_ENV

log = logging.getLogger("pytest_vlaeval.serving")


def parser() -> argparse.ArgumentParser:
    default = ServerConfig()
    parser = argparse.ArgumentParser(prog="vlaeval-serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", required=True, help="module:attr (class or factory), or a built-in: random, zero")
    parser.add_argument("--host", default=default.host, help=f"address to bind [{default.host}: this machine only]")
    parser.add_argument("--port", type=int, default=default.port, help=f"port; 0 picks a free one [{default.port}]")
    parser.add_argument(
        "--protocol", choices=PROTOCOLS, default=default.protocol, help=f"wire protocol [{default.protocol}]"
    )
    parser.add_argument(
        "--action-dim", type=int, default=default.action_dim, help=f"action dimension D [{default.action_dim}]"
    )
    parser.add_argument(
        "--max-batch-size",
        type=_positive(int),
        default=default.max_batch_size,
        help=f"1 is the exact mode [{default.max_batch_size}]",
    )
    parser.add_argument(
        "--max-wait-ms",
        type=_non_negative,
        default=default.max_wait_ms,
        help=f"longest a request waits for batch mates [{default.max_wait_ms:g}]",
    )
    parser.add_argument(
        "--max-episodes",
        type=_positive(int),
        default=default.max_episodes,
        help=f"episodes open at once [{default.max_episodes}]",
    )
    parser.add_argument(
        "--admission-timeout-s",
        type=_positive(float),
        default=default.admission_timeout_s,
        help=f"how long an open waits for a slot [{default.admission_timeout_s:g}]",
    )
    parser.add_argument(
        "--idle-timeout-s",
        type=_positive(float),
        default=default.idle_timeout_s,
        help=f"close episodes idle this long [{default.idle_timeout_s:g}]",
    )
    parser.add_argument(
        "--max-message-bytes",
        type=_positive(int),
        default=default.max_message_bytes,
        help=f"largest accepted frame [{default.max_message_bytes // 2**20} MiB]",
    )
    parser.add_argument("--token", default=os.environ.get(TOKEN_ENV), help=f"required token [${TOKEN_ENV}]")
    parser.add_argument("--stop-on-stdin-eof", action="store_true", help="stop when standard input closes")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        local_reference(args.policy)  # a server serves a local policy; it never proxies another server
    except SpecError as exc:
        print(f"vlaeval-serve: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s vlaeval-serve %(levelname)s %(message)s")
    logging.getLogger("websockets").setLevel(logging.WARNING)  # one line per health check otherwise
    config = ServerConfig(
        host=args.host,
        port=args.port,
        action_dim=args.action_dim,
        max_batch_size=args.max_batch_size,
        max_wait_ms=args.max_wait_ms,
        max_episodes=args.max_episodes,
        admission_timeout_s=args.admission_timeout_s,
        idle_timeout_s=args.idle_timeout_s,
        max_message_bytes=args.max_message_bytes,
        token=args.token or None,
        protocol=args.protocol,
    )
    if not config.token and not _is_loopback(config.host):
        log.warning("serving on %s without a token: anyone who can reach it can use the policy", config.host)
    return asyncio.run(_serve(args.policy, config, args.stop_on_stdin_eof))


async def _serve(spec: str, config: ServerConfig, stop_on_stdin_eof: bool) -> int:
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
    loading = asyncio.create_task(server.load())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if loading.done():
            loading.result()
            await stopping
    except (PolicyError, SpecError) as exc:
        log.error("cannot load policy %s: %s", spec, exc)
        return 1
    finally:
        loading.cancel()
        stopping.cancel()
        await server.stop()
    return 0


def _wait_for_stdin_eof(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    # Raw reads: a thread blocked inside sys.stdin's buffer would hold its lock at interpreter exit.
    while os.read(sys.stdin.fileno(), 4096):
        pass
    loop.call_soon_threadsafe(stop.set)


def _is_loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host == "localhost"


def _positive(kind: type) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return convert


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


if __name__ == "__main__":
    sys.exit(main())
