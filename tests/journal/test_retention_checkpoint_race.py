"""Retention and a writer's checkpoint running at once leave no span below the floor.

A writer plans a checkpoint's log spans from the ``RETENTION`` marker it read
before planning; retention lists the checkpoints whose spans it must turn into
blobs before it writes the marker. Either can run inside the other's window: the
writer reads the marker again once its checkpoint exists, and retention lists the
checkpoints again once its marker is written, so whichever comes second fixes the
checkpoint before any record it names is removed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from journal import Journal, MessageAppended, Msg, ThreadKey, codec
from journal.checkpoint import LogSpan
from journal.engine import checkpoints

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    import pytest

KEY = ThreadKey("agent", "race")


async def _fill_to(w: Any, version: int, counter: list[int]) -> None:
    while w.version < version:
        ids = [f"m{counter[0] + i}" for i in range(3)]
        await w.append([MessageAppended(Msg("user", i, id=i)) for i in ids])
        counter[0] += 3


async def _check(root: Path, messages: int) -> None:
    j = Journal.open(root, checkpoint_every=0)
    log = j._log(KEY)
    marker = await log.read_retention()
    assert marker is not None
    assert marker.first_retained > 1
    for version in await log.checkpoint_versions():
        body = codec.decode_checkpoint(await log.read_checkpoint(version))
        spans = [s for r in body.chunks if (s := LogSpan.parse(r)) is not None]
        assert all(s.first >= marker.first_retained for s in spans), version
    state, warnings = await j.load_with_warnings(KEY)
    assert warnings == []
    assert [m.id for m in state.context] == [f"m{i}" for i in range(messages)]
    report = await j.verify(KEY)
    assert report.ok, report.problems


async def test_retention_inside_a_checkpoints_planning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails when the writer reads the marker only before planning: retention ran
    between the planning and the checkpoint's creation, and the new checkpoint
    named log spans over records it had removed (every load skipped it, verify
    reported a problem)."""
    root = tmp_path / "j"
    j = Journal.open(root, checkpoint_every=0)
    hook: list[Callable[[], Awaitable[object]]] = []
    real = checkpoints.plan_chunks

    async def planned_then_retained(*args: Any, **kwargs: Any) -> Any:
        out = await real(*args, **kwargs)
        while hook:
            await hook.pop()()
        return out

    monkeypatch.setattr(checkpoints, "plan_chunks", planned_then_retained)
    counter = [0]
    async with j.writer(KEY, holder="w") as w:
        await _fill_to(w, 10, counter)
        await w.checkpoint()
        await _fill_to(w, 20, counter)
        hook.append(lambda: j.retain(KEY, window=0))
        await w.checkpoint()
    await _check(root, counter[0])


async def test_a_checkpoint_created_after_retentions_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails when retention lists the checkpoints only before writing its marker:
    one created after that listing, its spans planned before the marker, kept
    naming records retention then removed."""
    root = tmp_path / "j"
    j = Journal.open(root, checkpoint_every=0)
    counter = [0]
    async with j.writer(KEY, holder="w") as w:
        await _fill_to(w, 10, counter)
        await w.checkpoint()
        await _fill_to(w, 20, counter)
        await w.checkpoint()
    log = j._log(KEY)
    newest = max(await log.checkpoint_versions())
    listings = [0]
    real_versions = type(log).checkpoint_versions

    async def early_listings_miss_the_newest(self: Any) -> list[int]:
        found = await real_versions(self)
        listings[0] += 1
        # Retention's listings before its marker (the one choosing the checkpoint
        # to keep, the one naming those whose spans it rewrites): as if the
        # newest was created just after them, its spans planned before the marker.
        return [v for v in found if v != newest] if listings[0] <= 2 else found

    monkeypatch.setattr(
        type(log), "checkpoint_versions", early_listings_miss_the_newest
    )
    assert await j.retain(KEY, window=0) is not None
    monkeypatch.undo()
    await _check(root, counter[0])
