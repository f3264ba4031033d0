"""The local store's fast key checks refuse exactly what the per-part rule does.

``LocalStore._path`` checks a key with one search of ``_BAD_KEY``; the rule it
stands for is ``_bad_part`` on every part. Many keys at once (a listing's thousand
LEASEs, a load's hundred record names) are joined by newlines and checked with
``_maybe_bad_keys``: substring searches that stand for the multi-line form of the
same pattern (``_MULTILINE`` here, what the store searched with before).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stores.local import _BAD_KEY, _BAD_PART, LocalStore, _bad_part, _maybe_bad_keys

_MULTILINE = re.compile(_BAD_PART.format(end="$"), re.MULTILINE)

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
    """``exist_many`` checks the keys joined by newlines once: wherever one is
    bad, that check says so (then each key is checked alone)."""
    if any(_BAD_KEY.search(key) is not None for key in keys):
        assert _maybe_bad_keys("\n".join(keys))


@given(st.lists(_PIECES | st.just("\n"), max_size=12).map("".join))
def test_the_substring_check_is_the_multiline_pattern(joined: str) -> None:
    assert _maybe_bad_keys(joined) == (_MULTILINE.search(joined) is not None)


@given(st.text(max_size=40))
def test_the_substring_check_agrees_on_any_text(joined: str) -> None:
    assert _maybe_bad_keys(joined) == (_MULTILINE.search(joined) is not None)


async def test_read_siblings_names_a_bad_name_among_records(tmp_path) -> None:
    store = LocalStore(tmp_path)
    names = [f"{v:020d}.rec" for v in range(1, 101)]
    await store.create("t/log/" + names[0], b"x")
    found = await store.read_siblings("t/log/", names)
    assert found[0] == b"x"
    assert found[1:] == [None] * 99
    for bad in ("", ".x", "a\\b", "a\x00"):
        with pytest.raises(ValueError, match="invalid object key"):
            await store.read_siblings("t/log/", [*names[:50], bad, *names[50:]])


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
