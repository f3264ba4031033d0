"""The cost of encryption at rest: commit, load and bytes, encrypted vs plain.

Run: ``python benchmarks/bench_crypto.py [--quick] [--out FILE]``

Four journals on local disk take the same workload (``_peers.workload``: a realistic
agent turn, ~9 KB of text): plain, encrypted, zstd, and zstd + encrypted. Commits
alternate between them in blocks, so machine noise falls on all alike; the table
reports each encrypted variant as a ratio of its unencrypted twin. Load is a fresh
``Journal`` (a cold keyring: the data key is unwrapped once) rebuilding the state
from its newest checkpoint plus the tail, and a full replay of ``records``. A last
row times ``verify`` with the key and without it (structure only). Seal signing at
each checkpoint is on in the encrypted journals' ``signed`` variant.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
from _peers.base import du
from _peers.journal_peer import events as peer_events
from _peers.workload import make_turn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from journal import Journal, ThreadKey, codec
from journal.crypto import StaticKeys, generate_key
from journal.keyring import Keyring, ThreadCipher
from stores.memory import MemoryStore

KEY = ThreadKey("bench", "crypto", user_id="alice")
PROVIDER = StaticKeys([generate_key()])
SIGNER = Ed25519PrivateKey.generate()

VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "encrypted": {"encryption": PROVIDER},
    "encrypted+signed": {"encryption": PROVIDER, "signing_key": SIGNER},
    "zstd": {"compression": "zstd"},
    "zstd+encrypted": {"compression": "zstd", "encryption": PROVIDER},
}
TWIN = {
    "encrypted": "plain",
    "encrypted+signed": "plain",
    "zstd+encrypted": "zstd",
}


def open_variant(root: Path, name: str, fsync: bool) -> Journal:
    return Journal.open(
        root / name, fsync=fsync, checkpoint_every=100, **VARIANTS[name]
    )


async def commit_block(writer: Any, start: int, n: int) -> list[float]:
    out = []
    for i in range(start, start + n):
        events = peer_events(make_turn(i))
        t0 = time.perf_counter()
        await writer.append(events)
        out.append(time.perf_counter() - t0)
    return out


async def timed(fn: Any, reps: int) -> float:
    best = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await fn()
        best.append(time.perf_counter() - t0)
    return statistics.median(best)


async def codec_rows(n: int) -> list[tuple[str, str, str]]:
    """CPU cost per record of sealing and opening it, without any I/O."""
    cipher = ThreadCipher(
        Keyring(MemoryStore(), PROVIDER), "default/bench/alice/crypto/main"
    )
    await cipher.writable()
    turns = [peer_events(make_turn(i)) for i in range(n)]

    def encode(i: int) -> codec.EncodedRecord:
        return codec.encode_record(
            version=i + 1,
            epoch=1,
            writer="bench",
            batch_id=f"b-{i}",
            run_id=None,
            committed_at=0.0,
            prev_hash=codec.GENESIS_HASH,
            events=turns[i],
        )

    def sealed_one(i: int, plain: codec.EncodedRecord) -> codec.EncodedRecord:
        encoded = msgspec.structs.replace(plain)
        key_id, encrypt = cipher.record_encrypter(i + 1)
        codec.seal_record(encoded, version=i + 1, key_id=key_id, encrypt=encrypt)
        return encoded

    # Alternating blocks of 50, so a busy moment of the machine hits both alike;
    # the median block (per record) shrugs off the moments another process ran.
    times: dict[str, list[float]] = {"t_p": [], "t_s": [], "p_p": [], "p_s": []}
    plain: list[codec.EncodedRecord] = []
    for start in range(0, n, 50):
        block = range(start, min(n, start + 50))
        t0 = time.perf_counter()
        ours = [encode(i) for i in block]
        t1 = time.perf_counter()
        theirs = [sealed_one(i, e) for i, e in zip(block, ours, strict=True)]
        t2 = time.perf_counter()
        for i, e in zip(block, ours, strict=True):
            codec.parse_record(e.data, label="bench", version=i + 1)
        t3 = time.perf_counter()
        for i, e in zip(block, theirs, strict=True):
            codec.parse_record(
                e.data, label="bench", version=i + 1, opener=cipher.open_record
            )
        t4 = time.perf_counter()
        for name, spent in zip(
            times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True
        ):
            times[name].append(spent / len(block))
        plain += ours
    t_plain, t_seal, p_plain, p_sealed = (
        statistics.median(v) * n for v in times.values()
    )
    t_sealed = t_plain + t_seal  # encoding, then sealing what was encoded
    size = sum(len(e.data) for e in plain) // n
    return [
        (
            f"codec: encode a {size:,} B turn record, sealed vs plain (CPU)",
            f"{t_sealed / n * 1e6:.1f} µs vs {t_plain / n * 1e6:.1f} µs",
            f"{t_sealed / t_plain:.2f}x (+{(t_sealed - t_plain) / n * 1e6:.1f} µs)",
        ),
        (
            "codec: parse and check it, decrypting vs plain (CPU)",
            f"{p_sealed / n * 1e6:.1f} µs vs {p_plain / n * 1e6:.1f} µs",
            f"{p_sealed / p_plain:.2f}x (+{(p_sealed - p_plain) / n * 1e6:.1f} µs)",
        ),
    ]


async def main(quick: bool, fsync: bool) -> list[tuple[str, str, str]]:
    """Every row, measured in a scratch directory removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="aj-bench-crypto-"))
    try:
        return await measure(root, quick, fsync)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def measure(root: Path, quick: bool, fsync: bool) -> list[tuple[str, str, str]]:
    turns = 300 if quick else 2000
    block = 25
    reps = 3 if quick else 7
    journals = {n: open_variant(root, n, fsync) for n in VARIANTS}
    writers = {n: await j.acquire(KEY, holder="bench") for n, j in journals.items()}
    samples: dict[str, list[float]] = {n: [] for n in VARIANTS}
    done = 0
    while done < turns:
        for name, w in writers.items():
            samples[name] += await commit_block(w, done, block)
        done += block
    for w in writers.values():
        await w.close()

    rows = await codec_rows(300 if quick else 2000)
    p50 = {n: statistics.median(s) for n, s in samples.items()}
    for name, twin in TWIN.items():
        rows.append(
            (
                f"commit p50, {name} vs {twin} ({'fsync' if fsync else 'no fsync'})",
                f"{p50[name] * 1e6:.0f} µs vs {p50[twin] * 1e6:.0f} µs",
                f"{p50[name] / p50[twin]:.2f}x",
            )
        )

    # Interleaved: each repetition times every variant once, so a slow moment of
    # the machine (or a cold page cache) falls on all of them alike.
    load_s: dict[str, list[float]] = {n: [] for n in VARIANTS}
    replay_s: dict[str, list[float]] = {n: [] for n in VARIANTS}
    for _ in range(reps):
        for name in VARIANTS:
            t0 = time.perf_counter()
            await open_variant(root, name, fsync).load(KEY)
            load_s[name].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            async for _record in open_variant(root, name, fsync).records(KEY):
                pass
            replay_s[name].append(time.perf_counter() - t0)
    loads = {n: statistics.median(v) for n, v in load_s.items()}
    replays = {n: statistics.median(v) for n, v in replay_s.items()}
    for name, twin in TWIN.items():
        rows.append(
            (
                f"load (checkpoint + tail, cold keyring), {name} vs {twin}",
                f"{loads[name] * 1e3:.1f} ms vs {loads[twin] * 1e3:.1f} ms",
                f"{loads[name] / loads[twin]:.2f}x",
            )
        )
        rows.append(
            (
                f"full replay of {turns} records, {name} vs {twin}",
                f"{replays[name] * 1e3:.0f} ms vs {replays[twin] * 1e3:.0f} ms",
                f"{replays[name] / replays[twin]:.2f}x",
            )
        )
    # Records alone are deterministic; checkpoints run in the background, so how
    # many a journal wrote (and so its total) varies from run to run.
    logs = {n: sum(du(p)[0] for p in (root / n).rglob("log")) for n in VARIANTS}
    sizes = {n: du(root / n)[0] for n in VARIANTS}
    for name, twin in TWIN.items():
        rows.append(
            (
                f"record bytes, {name} vs {twin}",
                f"{logs[name]:,} B vs {logs[twin]:,} B",
                f"{logs[name] / logs[twin]:.3f}x",
            )
        )
        rows.append(
            (
                f"all bytes (with checkpoints, chunks, keys), {name} vs {twin}",
                f"{sizes[name]:,} B vs {sizes[twin]:,} B",
                f"{sizes[name] / sizes[twin]:.3f}x",
            )
        )

    keyed = open_variant(root, "encrypted", fsync)
    keyless = Journal.open(root / "encrypted", fsync=fsync)
    plain = open_variant(root, "plain", fsync)
    v_plain = await timed(lambda: plain.verify(KEY), reps)
    v_keyed = await timed(lambda: keyed.verify(KEY), reps)
    v_keyless = await timed(lambda: keyless.verify(KEY), reps)
    rows.append(
        (
            "verify, encrypted with key vs plain",
            f"{v_keyed * 1e3:.0f} ms vs {v_plain * 1e3:.0f} ms",
            f"{v_keyed / v_plain:.2f}x",
        )
    )
    rows.append(
        (
            "verify, encrypted without key (structure only) vs plain",
            f"{v_keyless * 1e3:.0f} ms vs {v_plain * 1e3:.0f} ms",
            f"{v_keyless / v_plain:.2f}x",
        )
    )
    report = await open_variant(root, "encrypted+signed", fsync).verify(
        KEY, trust=SIGNER.public_key()
    )
    assert report.ok, report.problems
    return rows


def render(rows: list[tuple[str, str, str]], quick: bool, fsync: bool) -> str:
    lines = [
        f"python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} cpus; {'quick' if quick else 'full'} run, "
        f"fsync={fsync}",
        "",
        "| measure | value | ratio |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke)")
    parser.add_argument(
        "--no-fsync", action="store_true", help="commit without fsync (CPU cost only)"
    )
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    table = render(
        asyncio.run(main(args.quick, not args.no_fsync)), args.quick, not args.no_fsync
    )
    sys.stdout.write(table)
    if args.out is not None:
        args.out.write_text(table)
