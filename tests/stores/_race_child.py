"""A racer for the cross-process tests of the local store.

Run as ``python -m tests.stores._race_child ROOT IDENT``. It prints ``ready``,
then performs one operation per command read from stdin and prints the outcome:

* ``create ROUND KEY`` -> ``won ETAG`` or ``lost``
* ``replace ROUND KEY ETAG`` -> ``won ETAG`` or ``lost``
* ``exit``

Anything unexpected is printed as ``error REPR``. The parent releases all racers
at once by writing a command to each of them while they block on stdin.
"""

from __future__ import annotations

import asyncio
import sys

from journal.errors import ObjectExistsError, PreconditionFailedError
from stores.local import LocalStore


def body_for(ident: int, rnd: int) -> bytes:
    seed = f"racer-{ident}-round-{rnd};".encode()
    return seed * (48 * 1024 // len(seed))


async def main(root: str, ident: int) -> None:
    store = LocalStore(root)
    print("ready", flush=True)
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        cmd = line.split()
        if not cmd or cmd[0] == "exit":
            return
        try:
            if cmd[0] == "create":
                etag = await store.create(cmd[2], body_for(ident, int(cmd[1])))
            elif cmd[0] == "replace":
                etag = await store.replace(
                    cmd[2], body_for(ident, int(cmd[1])), if_match=cmd[3]
                )
            else:
                raise ValueError(f"unknown command {line!r}")
        except (ObjectExistsError, PreconditionFailedError):
            print("lost", flush=True)
        except Exception as exc:  # reported to the parent, which fails the test
            print(f"error {exc!r}", flush=True)
        else:
            print(f"won {etag}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
