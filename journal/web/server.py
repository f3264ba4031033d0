"""The web UI's HTTP side (aiohttp): routes, access checks, live updates.

Every route is a GET: the page (``/``), its two static files, the JSON documents
of :mod:`journal.web.views` under ``/api/``, and ``/api/live``, a server-sent
event stream that says when a thread's head (or the set of threads) moved.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web

from journal.cli.commands.threads import select_threads
from journal.cli.errors import EXIT_USAGE, CommandError
from journal.cli.options import ThreadFilter
from journal.errors import InvalidKeyError, JournalError
from journal.web.attention import AttentionCache
from journal.web.run_cache import RunCache
from journal.web.security import COOKIE_NAME, TOKEN_PARAM
from journal.web.views import (
    THREAD_PARAMS,
    ThreadQuery,
    diff_view,
    key_from_params,
    page_limit,
    state_view,
    threads_view,
    timeline_view,
    verify_view,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from journal.engine import Journal
    from journal.web.security import AccessPolicy

__all__ = ["STATIC_FILES", "UiConfig", "create_app"]

STATIC_FILES = {
    "app.js": "text/javascript",
    "app.css": "text/css",
}
"""The files under ``/static/`` and their content types (nothing else is served)."""

# The page runs only its own script and style: even if some text were ever
# rendered as markup, an injected <script> or inline handler would not run.
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
_SECURITY_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


@dataclass(frozen=True, slots=True)
class UiConfig:
    """What the application serves, and to whom.

    Attributes:
        journal: The open journal (read only: nothing here writes).
        root: Its root URL, as the page shows it.
        policy: The access checks.
        poll_interval: Seconds between the live stream's looks at the journal.
        keepalive: Seconds of silence after which the stream sends a comment.
    """

    journal: Journal
    root: str
    policy: AccessPolicy
    poll_interval: float = 1.0
    keepalive: float = 15.0
    cache: AttentionCache = field(default_factory=AttentionCache)
    runs: RunCache = field(default_factory=RunCache)


_CONFIG = web.AppKey("config", UiConfig)

# --- access ---------------------------------------------------------------------------


def _offered_token(request: web.Request) -> tuple[str | None, bool]:
    """The token a request carries, and whether it came in the query string."""
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip(), False
    if TOKEN_PARAM in request.query:
        return request.query[TOKEN_PARAM], True
    return request.cookies.get(COOKIE_NAME), False


def _plain(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


@web.middleware
async def _guard(
    request: web.Request,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> web.StreamResponse:
    config = request.app[_CONFIG]
    policy = config.policy
    if not policy.host_allowed(request.headers.get("Host")):
        response: web.StreamResponse = _plain(
            403, "403: this server answers only requests addressed to loopback"
        )
    else:
        offered, in_query = _offered_token(request)
        if not policy.token_matches(offered):
            response = _plain(401, "401: a valid token is required")
            response.headers["WWW-Authenticate"] = 'Bearer realm="agent-journal"'
        elif in_query and policy.token is not None:
            # Keep the token out of the address bar and history: a cookie from now.
            query = [(k, v) for k, v in request.query.items() if k != TOKEN_PARAM]
            response = web.Response(
                status=303, headers={"Location": str(request.rel_url.with_query(query))}
            )
            response.set_cookie(
                COOKIE_NAME,
                policy.token,
                httponly=True,
                samesite="Strict",
                path="/",
            )
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                # A plain response, so the headers below can be added to it.
                response = web.Response(
                    status=exc.status, text=exc.text, headers=exc.headers
                )
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    response.headers.setdefault("Cache-Control", "no-store")
    return response


# --- documents ------------------------------------------------------------------------


def _json(document: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=msgspec.json.encode(document),
        content_type="application/json",
    )


def _error(status: int, message: str) -> web.Response:
    return _json({"error": " ".join(message.split())}, status)


def _version_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise ValueError(f"{name} must be a version number (0 or more), not {raw!r}")
    return int(raw)


async def _answer(
    build: Callable[[], Awaitable[Any]],
) -> web.Response:
    """Run ``build`` and turn what it raises into an error document."""
    try:
        return _json(await build())
    except InvalidKeyError as exc:
        return _error(400, str(exc))
    except ValueError as exc:
        return _error(400, str(exc))
    except CommandError as exc:
        # The CLI's "bad usage" is a bad request; anything else it refuses is a
        # thread or version that is not there.
        return _error(400 if exc.code == EXIT_USAGE else 404, str(exc))
    except JournalError as exc:
        return _error(500, str(exc))


async def _index(request: web.Request) -> web.StreamResponse:
    page = resources.files("journal.web").joinpath("static", "index.html")
    return web.Response(body=page.read_bytes(), content_type="text/html")


async def _static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    kind = STATIC_FILES.get(name)
    if kind is None:
        raise web.HTTPNotFound(text="404: no such file\n")
    body = resources.files("journal.web").joinpath("static", name).read_bytes()
    return web.Response(body=body, content_type=kind)


async def _favicon(request: web.Request) -> web.StreamResponse:
    # Browsers ask for one; answering "no content" keeps their consoles quiet.
    return web.Response(status=204)


async def _info(request: web.Request) -> web.StreamResponse:
    config = request.app[_CONFIG]
    return _json({"root": config.root, "poll_interval": config.poll_interval})


async def _threads(request: web.Request) -> web.StreamResponse:
    config = request.app[_CONFIG]
    q = request.query
    query = ThreadQuery(
        text=q.get("text", ""),
        agent=q.get("agent", ""),
        user=q.get("user", ""),
        session=q.get("session", ""),
        attention=q.get("attention", "") in ("1", "true", "on"),
    )
    return await _answer(
        lambda: threads_view(config.journal, config.root, query, config.cache)
    )


async def _timeline(request: web.Request) -> web.StreamResponse:
    config = request.app[_CONFIG]

    async def build() -> Any:
        before = _version_param(request, "before")
        limit = page_limit(request.query.get("limit", ""))
        key = key_from_params(request.query)
        return await timeline_view(
            config.journal,
            config.root,
            key,
            config.cache,
            before=before,
            limit=limit,
            run=request.query.get("run"),
            run_cache=config.runs,
        )

    return await _answer(build)


async def _state(request: web.Request) -> web.StreamResponse:
    config = request.app[_CONFIG]

    async def build() -> Any:
        at = _version_param(request, "at")
        shown = request.query.get("messages", "").strip()
        if shown not in ("", "all"):
            raise ValueError(f"messages must be 'all' or left out, not {shown!r}")
        key = key_from_params(request.query)
        return await state_view(
            config.journal, config.root, key, at, all_messages=shown == "all"
        )

    return await _answer(build)


async def _diff(request: web.Request) -> web.StreamResponse:
    config = request.app[_CONFIG]

    async def build() -> Any:
        start = _version_param(request, "from")
        stop = _version_param(request, "to")
        key = key_from_params(request.query)
        return await diff_view(config.journal, config.root, key, start, stop)

    return await _answer(build)


async def _verify(request: web.Request) -> web.StreamResponse:
    config = request.app[_CONFIG]
    return await _answer(
        lambda: verify_view(config.journal, config.root, key_from_params(request.query))
    )


# --- live updates ---------------------------------------------------------------------


async def _fingerprint(config: UiConfig, request: web.Request) -> object:
    """What the stream watches: one thread's head, or every thread's."""
    journal = config.journal
    if any(name in request.query for name in THREAD_PARAMS):
        return await journal.head(key_from_params(request.query))
    keys = await select_threads(journal, ThreadFilter())
    heads = await asyncio.gather(*(journal.head(k) for k in keys))
    return sorted(zip((str(k) for k in keys), heads, strict=True))


async def _live(request: web.Request) -> web.StreamResponse:
    config = request.app[_CONFIG]
    try:
        last = await _fingerprint(config, request)
    except (InvalidKeyError, ValueError) as exc:
        return _error(400, str(exc))
    stream = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    for name, value in _SECURITY_HEADERS.items():
        stream.headers[name] = value
    await stream.prepare(request)
    silent = 0.0
    # The client went away: end the stream.
    with contextlib.suppress(ConnectionResetError):
        await stream.write(b"retry: 2000\nevent: ready\ndata: {}\n\n")
        while True:
            await asyncio.sleep(config.poll_interval)
            silent += config.poll_interval
            try:
                now = await _fingerprint(config, request)
            except JournalError:
                continue  # a transient read error: look again next time
            if now != last:
                last, silent = now, 0.0
                data = msgspec.json.encode(
                    {"head": now if isinstance(now, int) else None}
                )
                await stream.write(b"event: changed\ndata: " + data + b"\n\n")
            elif silent >= config.keepalive:
                silent = 0.0
                await stream.write(b": keepalive\n\n")
    return stream


# --- the application ------------------------------------------------------------------


def create_app(config: UiConfig) -> web.Application:
    """The read-only web application over ``config.journal``.

    Args:
        config: The journal, its root, the access policy and the live-update pace.

    Returns:
        An aiohttp application; run it with ``aiohttp.web.AppRunner``.
    """
    app = web.Application(middlewares=[_guard])
    app[_CONFIG] = config
    app.router.add_get("/", _index)
    app.router.add_get("/static/{name}", _static)
    app.router.add_get("/favicon.ico", _favicon)
    app.router.add_get("/api/info", _info)
    app.router.add_get("/api/threads", _threads)
    app.router.add_get("/api/timeline", _timeline)
    app.router.add_get("/api/state", _state)
    app.router.add_get("/api/diff", _diff)
    app.router.add_get("/api/verify", _verify)
    app.router.add_get("/api/live", _live)
    return app
