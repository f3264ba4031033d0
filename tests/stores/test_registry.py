"""stores.registry: which URLs open as a local directory."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stores.local import LocalStore
from stores.registry import is_local, open_store

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    "url",
    ["{root}", "file://{root}", "FILE://{root}", "memory://registry-test"],
)
def test_is_local_says_what_open_store_opens_as_a_local_store(url, tmp_path: Path):
    url = url.format(root=tmp_path / "j")
    assert is_local(url) == isinstance(open_store(url), LocalStore)


@pytest.mark.parametrize("url", ["s3://bucket/prefix", "gcs://bucket", "redis://h"])
def test_remote_urls_are_not_local(url):
    assert not is_local(url)
