"""The journal contract: one pytest suite for the engine on every object store.

Subclass :class:`JournalContract` and override its ``journal_url`` fixture (and, if
the backend needs them, ``storage_options``) to run the whole suite on a backend::

    class TestLocalJournal(JournalContract):
        @pytest.fixture
        async def journal_url(self, tmp_path):
            return str(tmp_path / "journal")

Every test opens its journals through the ``journal`` fixture, a factory that returns
a *fresh* :class:`~journal.Journal` (with a fresh store object) on the same storage
each time it is called, so a second journal stands in for another process. Tests work
on threads with fresh, unique ids, so bindings may share one root or bucket between
tests.

The suite is the combination of one part per capability, each a class of its own
module that binds the same way; a backend that offers only some capabilities
subclasses only those parts:

* :class:`AppendContract` (``append``): append and reload; records, their order and
  hash chain; time travel; concurrent appends on one writer.
* :class:`VersionsContract` (``versions``): version conflicts; idempotent
  ``batch_id`` retries (also after a lost acknowledgement).
* :class:`LeaseContract` (``lease``): the lease held, waited for, taken over by the
  same holder, kept by a successor when a superseded writer closes, raced for.
* :class:`FencingContract` (``fencing``): fencing of a superseded writer, including a
  lower-epoch commit that lands between a takeover's lease swap and its fence, and a
  ``LEASE`` object that was lost; failing renewals; recovery of an unfinished run.
* :class:`CheckpointContract` (``checkpoints``): checkpoint plus tail replay equal to
  a full replay (a hypothesis property); loading after a checkpoint never lists or
  reads the log before it.
* :class:`StateContract` (``state``): ``update``, ``save_state`` and
  ``clear_context``.
* :class:`PayloadContract` (``payloads``): large payloads as blobs; unknown event
  types and upcasters.
* :class:`ThreadsContract` (``threads``): listing threads and its filters.

The fixtures and helpers they share (:class:`JournalFactory`,
:class:`RecordingStore`) live in ``base``.
"""

from __future__ import annotations

from stores.testing.journal_contract.append import AppendContract
from stores.testing.journal_contract.base import (
    JournalFactory,
    JournalFixtures,
    RecordingStore,
)
from stores.testing.journal_contract.checkpoints import CheckpointContract
from stores.testing.journal_contract.fencing import FencingContract
from stores.testing.journal_contract.lease import LeaseContract
from stores.testing.journal_contract.payloads import PayloadContract
from stores.testing.journal_contract.state import StateContract
from stores.testing.journal_contract.threads import ThreadsContract
from stores.testing.journal_contract.versions import VersionsContract

__all__ = [
    "AppendContract",
    "CheckpointContract",
    "FencingContract",
    "JournalContract",
    "JournalFactory",
    "JournalFixtures",
    "LeaseContract",
    "PayloadContract",
    "RecordingStore",
    "StateContract",
    "ThreadsContract",
    "VersionsContract",
]


class JournalContract(
    AppendContract,
    VersionsContract,
    LeaseContract,
    FencingContract,
    CheckpointContract,
    StateContract,
    PayloadContract,
    ThreadsContract,
):
    """The behaviour of the journal engine on a backend; bind ``journal_url``.

    Example:
        ``class TestMemoryJournal(JournalContract)`` with a fixture
        ``async def journal_url(self): return f"memory://{uuid.uuid4().hex}"``.
    """
