"""The journal contract bound to S3: moto's server over HTTP, a fresh bucket per test.

Every test of :class:`~stores.testing.journal_contract.JournalContract` runs as is,
through ``Journal.open("s3://<bucket>/journal", endpoint_url=..., key=..., ...)``,
exactly as an application opens a journal on S3. Each journal the suite opens is a
new ``S3Store`` with its own HTTP session, as another process would have.
"""

# The fixtures imported from tests.services are parameters of the tests below.

from __future__ import annotations

from typing import Any

import pytest

from stores.testing.journal_contract import JournalContract
from tests.services.s3 import journal_options, make_bucket, s3_server  # noqa: F401

pytestmark = pytest.mark.s3


class TestS3Journal(JournalContract):
    @pytest.fixture
    async def journal_url(self, s3_server: str) -> str:
        return f"s3://{await make_bucket(s3_server)}/journal"

    @pytest.fixture
    def storage_options(self, s3_server: str) -> dict[str, Any]:
        # endpoint_url, key, secret, client_kwargs={"region_name": ...}, and the
        # shared botocore session.
        return journal_options(s3_server)
