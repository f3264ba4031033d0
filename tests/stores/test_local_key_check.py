"""The local store's one-regex key check refuses exactly what the per-part rule does.

``LocalStore._path`` checks a key with one search of ``_BAD_KEY`` (listing checks a
thousand keys at a time); the rule it stands for is ``_bad_part`` on every part.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores.local import _BAD_KEY, LocalStore, _bad_part

_PIECES = st.sampled_from(
    ["a", "b7", ".", "..", "/", "//", "\\", "\x00", ".x", "~", "%2F"]
)


@given(st.lists(_PIECES, max_size=10).map("".join))
def test_the_regex_refuses_what_the_rule_refuses(key: str) -> None:
    by_rule = any(map(_bad_part, key.split("/")))
    assert (_BAD_KEY.search(key) is not None) == by_rule


@given(st.text(max_size=40))
def test_the_regex_agrees_on_any_text(key: str) -> None:
    by_rule = any(map(_bad_part, key.split("/")))
    assert (_BAD_KEY.search(key) is not None) == by_rule


@pytest.mark.parametrize("key", ["", "/a", "a/", "a//b", ".a", "a/.b", "a\\b", "a\x00"])
def test_path_names_the_bad_key(tmp_path, key: str) -> None:
    with pytest.raises(ValueError, match="invalid object key"):
        LocalStore(tmp_path)._path(key)


def test_path_of_a_good_key_is_under_the_root(tmp_path) -> None:
    store = LocalStore(tmp_path)
    assert store._path("ns/a.b/~/LEASE") == f"{tmp_path}/ns/a.b/~/LEASE"
