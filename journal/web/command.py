"""``agent-journal ui``: serve the web UI until interrupted.

This module imports without the ``ui`` extra, so the command line can say what
is missing in one line; the server itself (:mod:`journal.web.server`) needs
aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

from journal.cli.errors import CommandError, usage_error
from journal.web.defaults import DEFAULT_HOST, DEFAULT_PORT
from journal.web.security import TOKEN_PARAM, AccessPolicy, is_loopback, new_token

if TYPE_CHECKING:
    from typing import TextIO

    from journal.engine import Journal

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MISSING_EXTRA",
    "UiOptions",
    "access_for",
    "serve_ui",
]

MISSING_EXTRA = (
    "the web UI needs the optional extra 'ui': pip install 'agent-journal[ui]'"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class UiOptions:
    """``ui``: where to listen and who may read.

    Attributes:
        root: The journal root URL, as the page shows it.
        host: The address to bind (loopback unless told otherwise).
        port: The TCP port (0: one the kernel picks; the URL printed says which).
        token: The token every request must carry; None means none on loopback
            and a generated one elsewhere.
        poll_interval: Seconds between the live updates' looks at the journal.
    """

    root: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = None
    poll_interval: float = 1.0


def access_for(host: str, token: str | None) -> tuple[AccessPolicy, bool]:
    """The access policy for serving on ``host``, and whether its token is new.

    Off loopback a token is always required: one is generated when none is given.

    Raises:
        CommandError: ``token`` is empty (exit 2).
    """
    generated = token is None and not is_loopback(host)
    try:
        policy = AccessPolicy(host, new_token() if generated else token)
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    return policy, generated


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


async def serve_ui(journal: Journal, options: UiOptions, out: TextIO) -> int:
    """Serve the web UI over ``journal`` until interrupted (SIGINT or SIGTERM).

    Prints the address to open (with the token, when one is asked for) on
    ``out``.

    Returns:
        0 once stopped.

    Raises:
        CommandError: The ``ui`` extra is not installed, the address cannot be
            bound, or the options are not valid.
    """
    try:
        from aiohttp import web

        from journal.web.server import UiConfig, create_app
    except ImportError:
        raise CommandError(MISSING_EXTRA) from None
    if not 0 <= options.port <= 65535:
        raise usage_error(f"--port must be 0 to 65535, not {options.port}")
    if options.poll_interval <= 0:
        raise usage_error(f"--poll must be above 0, not {options.poll_interval}")
    policy, generated = access_for(options.host, options.token)
    token = policy.token
    app = create_app(UiConfig(journal, options.root, policy, options.poll_interval))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, options.host, options.port)
        try:
            await site.start()
        except OSError as exc:
            raise CommandError(
                f"cannot listen on {options.host}:{options.port}: {exc.strerror}"
            ) from None
        port = int(runner.addresses[0][1])
        url = _url(options.host, port)
        print(f"serving {options.root} at {url}", file=out, flush=True)
        if token is not None:
            note = " (generated; pass --token to choose one)" if generated else ""
            print(f"open {url}?{TOKEN_PARAM}={token}{note}", file=out, flush=True)
        print("read-only; Ctrl-C stops it", file=out, flush=True)
        await _until_stopped()
    finally:
        await runner.cleanup()
    return 0


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
