"""A botocore too old to know S3's conditional writes is refused, not trusted.

s3fs drops every argument the installed botocore's ``PutObject`` model does not
name. Before botocore knew ``IfNoneMatch`` and ``IfMatch`` (releases before late
2024, which the ``s3`` extra's s3fs floor still admits), an exclusive create and a
compare-and-swap went out as plain overwrites: a fenced writer overwrote the new
writer's records. The store now checks the model before its first request.
"""

from __future__ import annotations

import uuid
from typing import Any

import aiobotocore.session
import pytest

from journal import Journal
from journal.errors import StorageError
from tests.services.s3 import journal_options, make_bucket, s3_server  # noqa: F401

pytestmark = pytest.mark.s3


def _session_without(*names: str) -> Any:
    """A botocore session whose S3 model lacks ``names`` on ``PutObject``."""
    session = aiobotocore.session.AioSession()
    loader = session.get_component("data_loader")
    load = loader.load_service_model

    def load_service_model(
        service: str, type_name: str, *args: Any, **kwargs: Any
    ) -> Any:
        model = load(service, type_name, *args, **kwargs)
        if service == "s3" and type_name == "service-2":
            model = dict(model, shapes=dict(model["shapes"]))
            shape = model["shapes"]["PutObjectRequest"]
            members = {k: v for k, v in shape["members"].items() if k not in names}
            model["shapes"]["PutObjectRequest"] = dict(shape, members=members)
        return model

    loader.load_service_model = load_service_model
    return session


@pytest.mark.parametrize("missing", [("IfNoneMatch", "IfMatch"), ("IfMatch",)])
async def test_a_botocore_without_conditional_puts_is_refused(
    s3_server: str,
    missing: tuple[str, ...],
) -> None:
    url = f"s3://{await make_bucket(s3_server)}/j"
    old = Journal.open(
        url, **journal_options(s3_server, session=_session_without(*missing))
    )
    good = Journal.open(url, **journal_options(s3_server))
    key = f"probe-{uuid.uuid4().hex}"
    await good.store.create(key, b"first")
    with pytest.raises(StorageError, match="IfMatch") as caught:
        await old.store.create(key, b"second")
    assert not caught.value.transient
    with pytest.raises(StorageError, match="IfMatch"):
        await old.store.read(key)
    assert (await good.store.read(key))[0] == b"first"
    await old.aclose()
    await good.aclose()
