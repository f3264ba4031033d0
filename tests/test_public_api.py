"""The public names of each package: sorted, complete, importable, documented."""

from __future__ import annotations

import importlib
import inspect

import pytest

PACKAGES = ["journal", "projections"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_unique(name):
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    assert len(exported) == len(set(exported))


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_complete(name):
    # Package roots are lazy: dir() lists what a name lookup can resolve, and every
    # exported name must resolve.
    module = importlib.import_module(name)
    for attr in module.__all__:
        getattr(module, attr)
    public = {
        attr
        for attr in dir(module)
        if not attr.startswith("_")
        and not inspect.ismodule(getattr(module, attr))
        and attr != "annotations"
    }
    assert public == set(module.__all__)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_is_documented(name):
    module = importlib.import_module(name)
    for attr in module.__all__:
        value = getattr(module, attr)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"{name}.{attr} has no docstring"


def test_spec_names_are_exported():
    import journal
    import journal.events

    for attr in [
        "Journal",
        "ThreadKey",
        "InvalidKeyError",
        "Msg",
        "TextBlock",
        "ToolUseBlock",
        "ToolResultBlock",
        "ThinkingBlock",
        "MessageAppended",
        "ToolCallRequested",
        "ToolCallCompleted",
        "RunStarted",
        "RunCompleted",
        "PermissionRuleSet",
        "TodosWritten",
        "ToolGroupActivated",
        "register_event",
        "register_upcaster",
        "JournalError",
        "VersionConflictError",
        "StaleStateError",
        "FencedError",
        "LeaseHeldError",
        "CorruptRecordError",
        "StorageError",
        "UncertainToolCallsError",
        "DuplicateRunError",
    ]:
        assert hasattr(journal, attr), attr
    for attr in [
        "AgentStateReplaced",
        "ContextCleared",
        "RunInterrupted",
        "ToolCallReconciled",
        "LeaseAcquired",
        "ThreadCreated",
    ]:
        assert getattr(journal.events, attr) is getattr(journal, attr)


def test_error_tree():
    import journal

    for name in [
        "VersionConflictError",
        "StaleStateError",
        "FencedError",
        "LeaseHeldError",
        "CorruptRecordError",
        "StorageError",
        "UncertainToolCallsError",
        "DuplicateRunError",
    ]:
        assert issubclass(getattr(journal, name), journal.JournalError)
    assert issubclass(journal.InvalidKeyError, ValueError)
    assert issubclass(journal.InvalidKeyError, journal.JournalError)
