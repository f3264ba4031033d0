"""An encrypted journal on S3 (moto): no plaintext in any object or object version.

The bucket is versioned, so overwritten and deleted objects stay as old versions:
those are scanned too, and after an erasure they must be as unreadable as the rest.
The keyring lives in a second, unversioned bucket, as docs/ENCRYPTION.md advises.
"""

from __future__ import annotations

import boto3
import pytest

from journal import Journal, MessageAppended, Msg, ThreadKey, ToolCallCompleted
from journal.crypto import Encryption, StaticKeys, generate_key
from journal.errors import ErasedError
from stores.registry import open_store
from tests.services.s3 import CREDENTIALS, journal_options, make_bucket, s3_server  # noqa: F401

pytestmark = pytest.mark.s3

MARKER = "walrus-obsidian-4411"


def _client(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=CREDENTIALS["key"],
        aws_secret_access_key=CREDENTIALS["secret"],
        region_name="us-east-1",
    )


def every_stored_byte(endpoint: str, bucket: str) -> bytes:
    client = _client(endpoint)
    out = []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []):
            body = client.get_object(
                Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"]
            )["Body"].read()
            out.append(body)
    assert out, "nothing was stored"
    return b"".join(out)


async def test_no_plaintext_in_the_bucket_and_erasure(s3_server):
    bucket = await make_bucket(s3_server)
    keyring_bucket = await make_bucket(s3_server)
    _client(s3_server).put_bucket_versioning(
        Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    options = journal_options(s3_server)
    encryption = Encryption(
        StaticKeys([generate_key()]),
        keyring=open_store(f"s3://{keyring_bucket}/keys", **options),
    )
    journal = Journal.open(
        f"s3://{bucket}/journal",
        encryption=encryption,
        compression="zstd",
        checkpoint_every=4,
        **options,
    )
    alice = ThreadKey("agent", "s1", user_id="alice")
    bob = ThreadKey("agent", "s1", user_id="bob")
    for key in (alice, bob):
        async with journal.writer(key) as w:
            for i in range(9):
                await w.append([MessageAppended(Msg("user", f"{MARKER} {i}"))])
            await w.append([ToolCallCompleted("c", MARKER * 20000)])
            await w.checkpoint()
    assert MARKER.encode() not in every_stored_byte(s3_server, bucket)
    assert (await journal.load(alice)).context[0].content.startswith(MARKER)
    assert (await journal.verify(alice)).encryption == "on"

    await journal.erase(user_id="alice")
    # The deleted objects survive as old versions in the bucket: restore them as
    # a backup would, and they are still unreadable.
    restored = Journal.open(f"s3://{bucket}/journal", encryption=encryption, **options)
    client = _client(s3_server)
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for marker in page.get("DeleteMarkers", []):
            client.delete_object(
                Bucket=bucket, Key=marker["Key"], VersionId=marker["VersionId"]
            )
    with pytest.raises(ErasedError):
        await restored.load(alice)
    report = await restored.verify(alice)
    assert report.ok, report.problems
    assert report.encryption == "erased"
    assert (await restored.load(bob)).context[0].content.startswith(MARKER)
    assert MARKER.encode() not in every_stored_byte(s3_server, bucket)
    for opened in (journal, restored):
        await opened.aclose()
    assert encryption.keyring is not None
    await encryption.keyring.aclose()
