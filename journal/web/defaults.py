"""The ``ui`` command's default address.

Its own module, so that the CLI parser imports it without the web modules'
security and serving code.
"""

from __future__ import annotations

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = "127.0.0.1"
"""Loopback: the UI is reachable from this machine only unless told otherwise."""
DEFAULT_PORT = 8765
"""The port ``agent-journal ui`` listens on by default."""
