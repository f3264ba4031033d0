"""The local store's one-regex key check refuses exactly what the per-part rule does.

``LocalStore._path`` checks a key with one search of ``_BAD_KEY`` (listing checks a
thousand keys at a time); the rule it stands for is ``_bad_part`` on every part.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores.local import _BAD_KEY, _BAD_KEYS, LocalStore, _bad_part

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


@given(st.lists(st.lists(_PIECES | st.just("\n"), max_size=6).map("".join)))
def test_one_search_over_many_keys_misses_no_bad_one(keys: list[str]) -> None:
    """``exist_many`` searches the keys joined by newlines once: wherever one is
    bad, that search finds something (then each key is checked alone)."""
    if any(_BAD_KEY.search(key) is not None for key in keys):
        assert _BAD_KEYS.search("\n".join(keys)) is not None


async def test_exist_many_names_a_bad_key_among_good_ones(tmp_path) -> None:
    store = LocalStore(tmp_path)
    await store.create("t/LEASE", b"x")
    assert await store.exist_many(["t/LEASE", "t/none"]) == [True, False]
    with pytest.raises(ValueError, match=r"invalid object key 't/\.hidden'"):
        await store.exist_many(["t/LEASE", "t/.hidden", "t/none"])


@pytest.mark.parametrize("key", ["", "/a", "a/", "a//b", ".a", "a/.b", "a\\b", "a\x00"])
def test_path_names_the_bad_key(tmp_path, key: str) -> None:
    with pytest.raises(ValueError, match="invalid object key"):
        LocalStore(tmp_path)._path(key)


def test_path_of_a_good_key_is_under_the_root(tmp_path) -> None:
    store = LocalStore(tmp_path)
    assert store._path("ns/a.b/~/LEASE") == f"{tmp_path}/ns/a.b/~/LEASE"
