"""Who may read the journal through the web UI: the bind address, token and Host.

Plain policy, no HTTP library: :mod:`journal.web.server` applies it to every
request. The model:

- The server binds to loopback unless told otherwise. On a loopback address it
  answers only requests whose ``Host`` header names loopback, so a web page on
  another site cannot read the journal through a DNS name rebound to 127.0.0.1.
- On any other address a token is required (generated when none is given), and
  with a token every request must carry it: a ``token`` query parameter once
  (the server answers with a cookie), then the cookie, or an
  ``Authorization: Bearer`` header. A wrong or missing token gets 401.
- Nothing the server offers changes the journal: only GET and HEAD routes exist.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass

__all__ = [
    "COOKIE_NAME",
    "LOOPBACK_NAMES",
    "TOKEN_PARAM",
    "AccessPolicy",
    "is_loopback",
    "new_token",
]

COOKIE_NAME = "agent_journal_token"
"""The cookie that carries the token after the first request."""

TOKEN_PARAM = "token"  # noqa: S105 (a parameter name, not a secret)
"""The query parameter a first request may carry the token in."""

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
"""Host names that always mean this machine."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is a loopback address.

    Args:
        host: An IPv4 or IPv6 address (brackets allowed) or a host name.
    """
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """A fresh random token (URL-safe, 192 bits)."""
    return secrets.token_urlsafe(24)


def _host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    name, _, port = value.rpartition(":")
    # An IPv6 address without brackets has several colons and no port.
    return value if not name or ":" in name or not port.isdigit() else name


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """The checks every request passes.

    Attributes:
        host: The address the server is bound to.
        token: The token requests must carry (None: no token is asked for).
    """

    host: str
    token: str | None = None

    def __post_init__(self) -> None:
        if self.token is not None and not self.token.strip():
            raise ValueError("the token must not be empty")
        if not is_loopback(self.host) and self.token is None:
            raise ValueError(
                f"a token is required to serve on {self.host!r}, which is not "
                "a loopback address"
            )

    @property
    def loopback(self) -> bool:
        """Whether the server is bound to a loopback address."""
        return is_loopback(self.host)

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request's ``Host`` header is acceptable.

        On loopback only loopback names pass; on another address any Host does,
        since the token guards it.
        """
        if not self.loopback:
            return True
        return header is not None and is_loopback(_host_name(header))

    def token_matches(self, offered: str | None) -> bool:
        """Whether ``offered`` is the token (always true when none is asked for)."""
        if self.token is None:
            return True
        if not offered:
            return False
        return hmac.compare_digest(offered.encode("utf-8"), self.token.encode("utf-8"))
