"""Listing threads on the local store: what the walk counts as a thread, and not."""

from __future__ import annotations

import os

from journal import Journal, MessageAppended, Msg, ThreadKey
from journal.layout import LEASE_NAME


async def write(root: os.PathLike[str], keys: list[ThreadKey]) -> None:
    journal = Journal.open(root)
    for key in keys:
        async with journal.writer(key) as w:
            await w.append([MessageAppended(Msg("user", repr(key)))])
    await journal.aclose()


async def listed(root: os.PathLike[str], **filters: object) -> list[ThreadKey]:
    journal = Journal.open(root)
    try:
        return [k async for k in journal.threads(**filters)]  # type: ignore[arg-type]
    finally:
        await journal.aclose()


async def test_a_path_whose_ids_no_key_may_hold_is_not_listed(tmp_path):
    # "%0A" decodes to a line break, which no ThreadKey id may hold: no journal
    # wrote that directory, and listing used to fail on it with InvalidKeyError.
    root = tmp_path / "root"
    key = ThreadKey("agent", "s1", user_id="alice")
    await write(root, [key])
    stray = root.joinpath("default", "agent", "alice", "%0A", "main")
    stray.mkdir(parents=True)
    (stray / LEASE_NAME).write_bytes(b"x")
    assert await listed(root) == [key]
    assert await listed(root, user_id="alice") == [key]


async def test_what_proves_a_thread_directory(tmp_path):
    root = tmp_path / "root"
    kept, leaseless, emptied, odd = (
        ThreadKey("agent", f"s{i}", user_id="u") for i in range(4)
    )
    await write(root, [kept, leaseless, emptied, odd])
    # Without its LEASE a thread still holds its records: listed, by the slow way.
    os.unlink(root.joinpath(*leaseless.segments, LEASE_NAME))
    # A directory every object of which is gone is no thread (directories outlive
    # their objects on the local store).
    emptied_dir = root.joinpath(*emptied.segments)
    for dirpath, _, filenames in os.walk(emptied_dir):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
    # A LEASE that is an empty directory holds no object either.
    odd_dir = root.joinpath(*odd.segments)
    for dirpath, _, filenames in os.walk(odd_dir):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
    (odd_dir / LEASE_NAME).mkdir()
    # Files and hidden directories beside the thread directories are skipped.
    (root / "default" / "agent" / "u" / "s0" / "stray-file").write_bytes(b"x")
    hidden = root.joinpath("default", "agent", "u", ".hidden", "main")
    hidden.mkdir(parents=True)
    (hidden / LEASE_NAME).write_bytes(b"x")
    assert await listed(root) == [kept, leaseless]
    assert await listed(root, session_id="s1") == [leaseless]
    assert await listed(root, session_id="s2") == []
    assert await listed(root, session_id="s3") == []


async def test_long_form_threads_keep_their_place_among_the_others(tmp_path):
    root = tmp_path / "root"
    keys = [
        ThreadKey("agent", "a"),
        ThreadKey("agent", "m" * 200),  # a hashed session segment
        ThreadKey("agent", "z"),
    ]
    await write(root, keys)
    by_path = sorted(keys, key=lambda k: k.segments)
    assert await listed(root) == by_path


async def test_listing_every_namespace_does_not_walk_the_durable_index(
    tmp_path, monkeypatch
):
    # The durable turns' index keeps a tree per queued thread under "~durable"
    # beside the namespaces; walked as if it were one, every path in it was
    # checked as a thread (a search of its directory for objects).
    from stores.local import LocalStore

    root = tmp_path / "root"
    keys = [ThreadKey("agent", f"s{i}", user_id="alice") for i in range(3)]
    await write(root, keys)
    store = LocalStore(root)
    for i in range(20):
        queued = f"~durable/q/{i:02d}/default/agent/alice/s{i}/main/t{1:012d}.turn"
        await store.create(queued, b"input")
    await store.aclose()

    scanned: list[str] = []
    real_scandir = os.scandir

    def scandir(path):  # type: ignore[no-untyped-def]
        scanned.append(os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert await listed(root) == keys
    under = [p for p in scanned if "~durable" in p]
    # Listing the top level finds "~durable" holds objects (one branch searched);
    # none of the twenty queued threads' trees is walked.
    assert len(under) <= 8, under
