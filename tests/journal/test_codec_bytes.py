"""The writer's single-pass encoding gives exactly the documented record bytes."""

from __future__ import annotations

import hashlib

from journal import codec
from journal import events as ev


def test_encoded_body_and_digest_match_the_documented_format():
    events = [
        ev.MessageAppended(ev.Msg("user", "x" * 70_000)),  # stored as a blob
        ev.LeaseAcquired(2, "w"),
        ev.SummarySet("s"),
    ]
    encoded = codec.encode_record(
        version=7,
        epoch=2,
        writer="w",
        batch_id="b",
        run_id="r",
        committed_at=1.5,
        prev_hash=b"\x01" * 32,
        events=events,
    )
    parsed = codec.parse_record(encoded.data, label="t", version=7)
    # The body re-encoded from its decoded form is byte for byte what was written.
    body = codec._encoder.encode(parsed.body)
    assert hashlib.sha256(b"\x01" * 32 + body).digest() == encoded.hash
    assert parsed.content_digest() == encoded.content_digest
    assert len(encoded.blobs) == 1


def test_chunk_encoder_hands_over_the_bytes_it_encoded():
    """``packed`` holds, for the chunks a call encoded, what ``pack_chunk`` gives."""
    from journal.checkpoint import ChunkEncoder, pack_chunk

    # Fixed ids: boundaries are content-defined by the ids, and random ones left
    # the first 200 messages without a boundary about one run in twenty-five.
    messages = [ev.Msg("user", f"message {i}", id=f"m{i:031d}") for i in range(300)]
    encoder = ChunkEncoder()
    first = encoder.chunk(messages[:200])
    assert len(first) > 1
    assert encoder.packed == {d: pack_chunk(m)[1] for d, m in first}
    for digest, data in encoder.packed.items():
        assert hashlib.sha256(data).hexdigest() == digest
    second = encoder.chunk(messages)
    # Closed chunks are reused without encoding; only the new ones are handed over.
    reused = {d for d, _ in first[:-1]}
    assert set(encoder.packed) == {d for d, _ in second} - reused
    assert encoder.packed == {d: pack_chunk(m)[1] for d, m in second if d not in reused}


def test_a_chunker_in_steps_chunks_alike():
    """``chunk_steps`` pauses now and then: same chunks, same bytes, and nothing
    changes in the encoder until it has run to its end."""
    from journal.checkpoint import ChunkEncoder

    messages = [ev.Msg("user", f"message {i}") for i in range(500)]
    plain, stepped = ChunkEncoder(), ChunkEncoder()
    for upto in (100, 500):
        steps = stepped.chunk_steps(messages[:upto], 7)
        pauses = 0
        while True:
            try:
                next(steps)
            except StopIteration as done:
                chunks = done.value
                break
            pauses += 1
        assert chunks == plain.chunk(messages[:upto])
        assert stepped.packed == plain.packed
        # Only the messages after the closed chunks are encoded again.
        assert 0 < pauses <= upto // 7
    # An abandoned run leaves the encoder as it was.
    before = (list(stepped._previous), list(stepped._closed), stepped.packed)
    # (Another order: everything is encoded again, so it surely pauses.)
    abandoned = stepped.chunk_steps(messages[::-1], 7)
    next(abandoned)
    abandoned.close()
    assert (stepped._previous, stepped._closed, stepped.packed) == before
