"""The CLI's keys, from the environment: encryption and seal signing.

``AGENT_JOURNAL_KEY_FILE`` names a key file (:class:`journal.crypto.KeyFile`), or
``AGENT_JOURNAL_KEK`` holds a key (:class:`journal.crypto.EnvKey`): the journal is
then opened with encryption, so encrypted threads read in full. Without either,
encrypted threads are checked as stored and read as locked or erased.
``AGENT_JOURNAL_SIGNING_KEY`` names an Ed25519 private key (PEM) for ``seal --new``.
Values are never printed.
"""

from __future__ import annotations

import os
from typing import Any

from journal.cli.errors import usage_error

__all__ = ["KEK_ENV", "KEY_FILE_ENV", "SIGNING_KEY_ENV", "journal_keys"]

KEY_FILE_ENV = "AGENT_JOURNAL_KEY_FILE"
KEK_ENV = "AGENT_JOURNAL_KEK"
SIGNING_KEY_ENV = "AGENT_JOURNAL_SIGNING_KEY"


def journal_keys() -> dict[str, Any]:
    """``Journal.open`` options for the keys the environment names (maybe none).

    Raises:
        CommandError: A key is named but unusable (exit 2).
    """
    options: dict[str, Any] = {}
    try:
        if os.environ.get(KEY_FILE_ENV):
            from journal.crypto import KeyFile

            options["encryption"] = KeyFile(os.environ[KEY_FILE_ENV])
        elif os.environ.get(KEK_ENV):
            from journal.crypto import EnvKey

            options["encryption"] = EnvKey(KEK_ENV)
        if os.environ.get(SIGNING_KEY_ENV):
            options["signing_key"] = os.environ[SIGNING_KEY_ENV]
    except (ValueError, OSError) as exc:
        raise usage_error(f"cannot use the key the environment names: {exc}") from None
    return options
