"""Where ``export`` puts records: one JSON line each, on a stream or into a file."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import msgspec

from journal.cli.controls import is_terminal, json_for_terminal
from journal.cli.errors import CommandError
from journal.cli.render_json import record_json

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import TextIO

    from journal.cli.commands.export import RecordSink
    from journal.codec import Record

__all__ = ["jsonl_file", "jsonl_stream"]


@contextlib.contextmanager
def jsonl_stream(out: TextIO) -> Iterator[RecordSink]:
    """A sink writing each record to ``out`` as it comes.

    On a terminal, controls JSON leaves raw are escaped (the same values).
    """
    encoder = msgspec.json.Encoder()
    tty = is_terminal(out)

    def write(record: Record) -> None:
        line = encoder.encode(record_json(record))
        if tty:
            line = json_for_terminal(line)
        out.write(line.decode("utf-8") + "\n")

    yield write


@contextlib.contextmanager
def jsonl_file(path: str) -> Iterator[RecordSink]:
    """A sink writing ``path`` whole or not at all.

    Lines go to ``<path>.partial``, renamed over ``path`` once every record is in;
    on any failure the partial file is removed.

    Raises:
        CommandError: The file cannot be written.
    """
    encoder = msgspec.json.Encoder()
    tmp = f"{path}.partial"
    try:
        with open(tmp, "wb") as fh:

            def write(record: Record) -> None:
                fh.write(encoder.encode(record_json(record)) + b"\n")

            yield write
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CommandError(f"cannot write {path}: {exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
