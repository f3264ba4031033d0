"""The store and journal contracts on Ceph RGW, a second real S3 server.

The same suites as on moto (``tests/stores/test_s3.py``,
``tests/s3/test_journal_contract.py``), bound to RGW over HTTP: RGW matches
``If-Match`` only against the unquoted etag and answers 412 for ``If-Match`` on a
missing key, where moto accepts either form and answers 404.
"""

# The fixtures imported from tests.services are parameters of the tests below.

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from stores.testing import JournalContract, StoreContract
from tests.services.rgw import rgw_server  # noqa: F401
from tests.services.s3 import journal_options, make_bucket, make_s3_store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from stores.s3 import S3Store

pytestmark = [pytest.mark.s3, pytest.mark.rgw]


class TestRGWStore(StoreContract):
    @pytest.fixture
    async def store(self, rgw_server: str) -> AsyncIterator[S3Store]:
        store = await make_s3_store(rgw_server)
        yield store
        await store.aclose()


class TestRGWJournal(JournalContract):
    @pytest.fixture
    async def journal_url(self, rgw_server: str) -> str:
        return f"s3://{await make_bucket(rgw_server)}/journal"

    @pytest.fixture
    def storage_options(self, rgw_server: str) -> dict[str, Any]:
        return journal_options(rgw_server)

    # The replay property (40 hypothesis examples, 80 s here) checks the engine's
    # folds, not the server: the memory, local and moto bindings run it, and the
    # store operations it uses are each covered above.
    test_checkpoint_plus_tail_equals_full_replay = None


async def test_if_match_semantics_of_the_server(rgw_server: str) -> None:
    """What the store relies on: RGW rejects the quoted etag and a missing key."""
    import s3fs

    from tests.services.s3 import CREDENTIALS

    bucket = await make_bucket(rgw_server)
    fs = s3fs.S3FileSystem(
        asynchronous=True,
        skip_instance_cache=True,
        endpoint_url=rgw_server,
        **CREDENTIALS,
    )
    client = await fs.set_session()
    try:
        put = await client.put_object(Bucket=bucket, Key="k", Body=b"1")
        etag = put["ETag"]
        assert etag.startswith('"')
        codes = []
        for key, match in (("k", etag), ("missing", etag.strip('"'))):
            try:
                await client.put_object(
                    Bucket=bucket, Key=key, Body=b"2", IfMatch=match
                )
                codes.append(200)
            except Exception as exc:  # botocore's ClientError
                codes.append(exc.response["ResponseMetadata"]["HTTPStatusCode"])
        assert codes == [412, 412]
        await client.put_object(
            Bucket=bucket, Key="k", Body=b"3", IfMatch=etag.strip('"')
        )
    finally:
        await client.close()
