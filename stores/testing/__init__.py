"""Conformance suites that every backend must pass, shipped for third parties.

``StoreContract`` (object stores), ``JournalContract`` (the journal on a store's URL)
and ``AgentStateStoreContract`` (snapshot-mode state stores). A backend binds a suite
by subclassing it and overriding its fixture; nothing else is needed::

    import pytest
    from stores.testing import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        async def store(self, tmp_path):
            return MyStore(tmp_path)

The suites are async tests; run them with pytest-asyncio in ``asyncio_mode = "auto"``.

``JournalContract`` combines one part per capability (``AppendContract``,
``LeaseContract``, ``FencingContract``, ...), each exported by
``stores.testing.journal_contract``: a backend with only some capabilities binds
only those parts, the same way.
"""

from __future__ import annotations

import pytest

# Rewrite the suite's asserts so that a failing backend gets readable messages.
pytest.register_assert_rewrite(
    "stores.testing.store_contract",
    "stores.testing.journal_contract",
    "stores.testing.state_contract",
)

from stores.testing.journal_contract import JournalContract  # noqa: E402
from stores.testing.state_contract import AgentStateStoreContract  # noqa: E402
from stores.testing.store_contract import StoreContract  # noqa: E402

__all__ = ["AgentStateStoreContract", "JournalContract", "StoreContract"]
