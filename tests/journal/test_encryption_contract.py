"""The journal contract on encrypted journals: every test of the suite, unchanged.

Encryption must be invisible to applications: the same results, idempotency, leases,
checkpoints and verify, with every record, checkpoint and blob encrypted and a seal
signed at every checkpoint.
"""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from journal.crypto import StaticKeys, generate_key
from stores.testing.journal_contract import JournalContract

_PROVIDER = StaticKeys([generate_key()])
_SIGNER = Ed25519PrivateKey.generate()


class TestLocalJournalEncrypted(JournalContract):
    @pytest.fixture
    async def journal_url(self, tmp_path):
        return str(tmp_path / "journal")

    @pytest.fixture
    def storage_options(self):
        return {
            "fsync": False,
            "compression": "zstd",
            "encryption": _PROVIDER,
            "signing_key": _SIGNER,
        }
