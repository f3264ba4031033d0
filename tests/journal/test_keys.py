"""Thread keys: hostile ids stay inside the root, never collide, invalid ones fail."""

from __future__ import annotations

import copy
import os
import pickle
import re
import string

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal import InvalidKeyError, Journal, MessageAppended, Msg, ThreadKey
from journal.keys import decode_segment, encode_segment
from stores.local import LocalStore

FIELDS = ("namespace", "agent_id", "user_id", "session_id", "thread_id")
SEGMENT = re.compile(r"^[A-Za-z0-9_%~-]+$")

HOSTILE = [
    "..",
    ".",
    "/",
    "\\",
    "%2F",
    "%",
    "%%",
    "%%x%%",
    "~",
    "~user",
    "../../../../etc/passwd",
    "a/../../b",
    "..\\..\\windows",
    "/absolute/path",
    ".hidden",
    "-",
    "_",
    "with space",
    "é",
    "e\u0301",
    "日本語のスレッド",
    "🦊🦊",
    "line\u2028separator",
    "x" * 150,  # the longest short form
    "x" * 151,  # the shortest long form
    "a" * 256,
    "/" * 70,  # 210 encoded bytes: long form
    "é" * 256,
    "%" * 256,
]


def key_with(field: str, value: str) -> ThreadKey:
    ids = {"agent_id": "agent", "session_id": "session"}
    ids[field] = value
    return ThreadKey(**ids)


def say(text: str) -> MessageAppended:
    return MessageAppended(Msg("user", text))


async def write_each(j: Journal, keys) -> None:
    for key in keys:
        async with j.writer(key) as w:
            await w.append([say(repr(key))])


async def check_each(j: Journal, keys) -> None:
    for key in keys:
        state = await j.load(key)
        assert [m.text for m in state.context] == [repr(key)]
        assert (await j.verify(key)).ok


def all_keys():
    return [key_with(field, value) for field in FIELDS for value in HOSTILE]


def test_hostile_ids_are_valid_and_map_to_single_safe_segments():
    for key in all_keys():
        segments = key.segments
        assert len(segments) == 5
        for segment in segments:
            assert SEGMENT.match(segment), segment
            assert segment not in (".", "..")
            assert not segment.startswith(".")
            assert len(segment.encode()) <= 255
        assert key.prefix == "/".join(segments)
        assert len(key.prefix.split("/")) == 5


@pytest.mark.parametrize("segments", [True, False], ids=["segments", "files"])
async def test_hostile_ids_never_escape_the_root(tmp_path, segments):
    root = tmp_path / "root"
    j = Journal.open(root, segments=segments)
    keys = all_keys()
    await write_each(j, keys)
    # Nothing was created beside the root ...
    assert sorted(os.listdir(tmp_path)) == ["root"]
    real_root = os.path.realpath(root)
    files = 0
    for dirpath, _, filenames in os.walk(tmp_path):
        assert not os.path.islink(dirpath)
        for name in filenames:
            path = os.path.realpath(os.path.join(dirpath, name))
            assert os.path.commonpath([path, real_root]) == real_root, path
            files += 1
    assert files > len(keys)
    # ... and each thread's objects are under its own prefix: its log directory
    # holds its two records (as files, or as frames of one segment file; a store
    # writing files leaves the segment file empty, the lock that keeps a framed
    # create of the same name out), and a store rooted at the thread's directory
    # finds exactly those.
    names = [f"{v:020d}.rec" for v in (1, 2)]
    segment = ".seg-00000000000000000000"
    for key in keys:
        thread = root.joinpath(*key.segments)
        files = [segment] if segments else sorted([segment, *names])
        assert sorted(os.listdir(thread / "log")) == files
        if not segments:
            assert os.path.getsize(thread / "log" / segment) == 0
        assert await LocalStore(thread).list("log/") == [f"log/{n}" for n in names]
    await check_each(Journal.open(root, segments=not segments), keys)
    listed = [k async for k in Journal.open(root).threads()]
    assert len(listed) == len(keys)
    assert set(listed) == set(keys)


PAIRS = [
    (ThreadKey("a/b", "c"), ThreadKey("a", "b/c")),
    (ThreadKey("a", "b", thread_id="c/d"), ThreadKey("a", "b/c", thread_id="d")),
    (ThreadKey("%2F", "s"), ThreadKey("/", "s")),
    (ThreadKey("%", "s"), ThreadKey("%25", "s")),
    (ThreadKey("a", "s", user_id="~"), ThreadKey("a", "s", user_id=None)),
    (ThreadKey("a", "s", user_id="%7E"), ThreadKey("a", "s", user_id="~")),
    (ThreadKey("a", "s", user_id="%7E"), ThreadKey("a", "s", user_id=None)),
    (ThreadKey("é", "s"), ThreadKey("e\u0301", "s")),
    (ThreadKey(".", "s"), ThreadKey("%2E", "s")),
    (ThreadKey("..", "s"), ThreadKey(".", "s")),
    (ThreadKey("a" * 255 + "b", "s"), ThreadKey("a" * 255 + "c", "s")),
    (ThreadKey("/" * 100 + "x", "s"), ThreadKey("/" * 100 + "y", "s")),
    (ThreadKey("a" * 256, "s"), ThreadKey(encode_segment("a" * 256), "s")),
    (ThreadKey("x" * 151, "s"), ThreadKey("x" * 150, "s")),
    (ThreadKey("a", "s", namespace="n/a"), ThreadKey("n", "a/s", namespace="a")),
]


@pytest.mark.parametrize(("one", "two"), PAIRS, ids=[str(i) for i in range(len(PAIRS))])
async def test_distinct_keys_never_collide(tmp_path, one, two):
    assert one != two
    assert one.prefix != two.prefix
    j = Journal.open(tmp_path / "root")
    await write_each(j, [one, two])
    await check_each(Journal.open(tmp_path / "root"), [one, two])
    listed = {k async for k in Journal.open(tmp_path / "root").threads()}
    assert listed == {one, two}


def test_anonymous_user_segment_is_unique():
    anonymous = ThreadKey("a", "s")
    assert anonymous.segments[2] == "~"
    for user in ("~", "%7E", "-", "_", "anonymous", "None"):
        assert ThreadKey("a", "s", user_id=user).segments[2] != "~"


async def test_threads_decodes_long_form_ids(tmp_path):
    long_ids = ["q" * 256, "/" * 80, "é" * 150 + "/end", "%" * 201]
    keys = [
        ThreadKey(long_ids[0], "s1"),
        ThreadKey("agent", long_ids[1], user_id=long_ids[2]),
        ThreadKey("agent", "s2", thread_id=long_ids[3], namespace=long_ids[0]),
        ThreadKey("agent", "s3", user_id="~"),
    ]
    for key in keys[:3]:
        assert any(s.startswith("%%") for s in key.segments)
        assert any(decode_segment(s) is None for s in key.segments)
    j = Journal.open(tmp_path / "root")
    await write_each(j, keys)
    listed = [k async for k in Journal.open(tmp_path / "root").threads()]
    assert sorted(listed, key=repr) == sorted(keys, key=repr)
    filtered = [
        k
        async for k in Journal.open(tmp_path / "root").threads(
            agent_id="agent", user_id=long_ids[2]
        )
    ]
    assert filtered == [keys[1]]


BAD_STRINGS = [
    "",
    "a" * 257,
    "\n",
    "line\nbreak",
    "nul\x00",
    "\x00",
    "tab\there",
    "cr\r",
    "del\x7f",
    "esc\x1b[0m",
    "c1\x85",
    "\ud800",  # a lone surrogate
]
BAD_TYPES = [5, 1.5, b"bytes", ["a"], object()]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", BAD_STRINGS, ids=repr)
def test_invalid_string_ids_raise_invalid_key_error(field, value):
    with pytest.raises(InvalidKeyError) as info:
        key_with(field, value)
    assert isinstance(info.value, ValueError)
    assert field in str(info.value)


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", BAD_TYPES, ids=lambda v: type(v).__name__)
def test_non_string_ids_raise_invalid_key_error(field, value):
    with pytest.raises(InvalidKeyError) as info:
        key_with(field, value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("field", ["namespace", "agent_id", "session_id", "thread_id"])
def test_only_the_user_may_be_none(field):
    with pytest.raises(InvalidKeyError):
        key_with(field, None)
    assert ThreadKey("a", "s", user_id=None).user_id is None


def test_limits_are_inclusive():
    assert ThreadKey("a" * 256, "s").agent_id == "a" * 256
    assert ThreadKey("a", "s", user_id="a").user_id == "a"


def test_keys_are_frozen_and_hashable():
    key = ThreadKey("a", "s", user_id="u")
    assert key == ThreadKey("a", "s", "u", "main", "default")
    assert len({key, ThreadKey("a", "s", "u")}) == 1
    with pytest.raises((TypeError, ValueError)):
        key.agent_id = "b"


_IDS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")),
    min_size=1,
    max_size=256,
) | st.text(alphabet=string.printable.strip() + "%~./\\", min_size=1, max_size=80)


@settings(max_examples=300, deadline=None, database=None)
@given(one=_IDS, two=_IDS)
def test_encoding_is_injective_and_safe(one, two):
    a, b = encode_segment(one), encode_segment(two)
    assert SEGMENT.match(a)
    assert a != "~"
    assert len(a.encode()) <= 255
    decoded = decode_segment(a)
    assert decoded is None or decoded == one
    if decoded is None:
        assert a.startswith("%%")
    assert (a == b) == (one == two)


class _CountingStore(LocalStore):
    """A local store that counts the directory walks listing asks of it."""

    def __init__(self, root: object) -> None:
        super().__init__(root)  # type: ignore[arg-type]
        self.calls: list[str] = []

    async def children(self, prefix: str) -> list[str]:
        self.calls.append("children")
        return await super().children(prefix)

    async def descendants(self, prefix, pattern):  # type: ignore[no-untyped-def]
        self.calls.append("descendants")
        return await super().descendants(prefix, pattern)


async def test_listing_walks_the_local_tree_in_one_call(tmp_path):
    # Listing used to ask for each directory's children in turn: one worker-thread
    # hop per user and per session, 2,000 for a thousand single-thread users.
    keys = [ThreadKey("agent", f"s{i}", user_id=f"u{i}") for i in range(12)]
    keys.append(ThreadKey("agent", "s0", user_id=None, thread_id="side"))
    await write_each(Journal.open(tmp_path / "root"), keys)
    # Without the index's marker (a store from before it), listing walks.
    (tmp_path / "root" / "~threads" / "COMPLETE").unlink()
    store = _CountingStore(tmp_path / "root")
    listed = [k async for k in Journal(store).threads()]
    assert sorted(listed, key=repr) == sorted(keys, key=repr)
    # The top level once (to leave out trees that are no namespace), then one
    # walk per namespace.
    assert store.calls == ["children", "descendants"]
    store.calls.clear()
    only = [k async for k in Journal(store).threads(user_id="u3")]
    assert only == [keys[3]]
    assert store.calls == ["children", "descendants"]
    store.calls.clear()
    named = [k async for k in Journal(store).threads(namespace="default")]
    assert sorted(named, key=repr) == sorted(keys, key=repr)
    assert store.calls == ["descendants"]


# --- ThreadKey's model interface (a plain class that behaves like the model it was) ---


def test_a_key_round_trips_through_dump_validate_pickle_and_copy():
    key = ThreadKey("a", "s", user_id="u", thread_id="t", namespace="n")
    assert key.model_dump() == {
        "agent_id": "a",
        "session_id": "s",
        "user_id": "u",
        "thread_id": "t",
        "namespace": "n",
    }
    assert ThreadKey.model_validate(key.model_dump()) == key
    assert ThreadKey.model_validate(key) is key
    assert ThreadKey.model_validate_json(key.model_dump_json()) == key
    assert pickle.loads(pickle.dumps(key)) == key  # noqa: S301 (our own bytes)
    assert copy.deepcopy(key) == key
    assert key.model_copy(update={"thread_id": "t2"}) == ThreadKey(
        "a", "s", "u", "t2", "n"
    )
    anonymous = ThreadKey("a", "s")
    assert "user_id" not in anonymous.model_dump(exclude_none=True)
    assert repr(anonymous) == (
        "ThreadKey(agent_id='a', session_id='s', user_id=None, "
        "thread_id='main', namespace='default')"
    )


@settings(max_examples=200, deadline=None, database=None)
@given(agent=_IDS, user=st.none() | _IDS)
def test_the_json_of_a_key_is_what_pydantic_wrote_for_it(agent, user):
    # Ids built from a key's JSON (the ADK adapter's event ids) were written when
    # ThreadKey was a pydantic model: the same key must give the same text.
    class Model(pydantic.BaseModel):
        agent_id: str
        session_id: str
        user_id: str | None = None
        thread_id: str = "main"
        namespace: str = "default"

    key = ThreadKey(agent, "s", user)
    assert key.model_dump_json() == Model(**key.model_dump()).model_dump_json()


def test_a_key_is_a_field_of_a_pydantic_model():
    class Holder(pydantic.BaseModel):
        key: ThreadKey

    key = ThreadKey("a", "s", "u")
    assert Holder(key=key).key is key
    assert Holder.model_validate({"key": key.model_dump()}).key == key
    assert Holder(key=key).model_dump() == {"key": key.model_dump()}
    assert (
        ThreadKey.model_validate_json(
            Holder(key=key).model_dump_json()[len('{"key":') : -1]
        )
        == key
    )
    with pytest.raises(pydantic.ValidationError, match="agent_id"):
        Holder.model_validate({"key": {"agent_id": "", "session_id": "s"}})


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: ThreadKey("a", "s", colour="red"), "colour: unexpected field"),
        (lambda: ThreadKey.model_validate({"agent_id": "a"}), "session_id"),
        (lambda: ThreadKey.model_validate(["a", "s"]), "not list"),
        (lambda: ThreadKey.model_validate_json(b"{"), "invalid thread key"),
        (lambda: ThreadKey("a", "s").model_copy(update={"user_id": ""}), "user_id"),
        (lambda: ThreadKey("", "\x00"), "agent_id: agent_id must not be empty; "),
    ],
)
def test_bad_key_input_is_an_invalid_key_error_naming_the_field(make, needle):
    with pytest.raises(InvalidKeyError, match=re.escape(needle)):
        make()


def test_a_key_cannot_be_changed_in_place():
    key = ThreadKey("a", "s")
    with pytest.raises(InvalidKeyError, match="frozen"):
        key.user_id = "u"
    with pytest.raises(InvalidKeyError, match="frozen"):
        del key.agent_id
    assert key == ThreadKey("a", "s")
    assert key != ("a", "s", None, "main", "default")
