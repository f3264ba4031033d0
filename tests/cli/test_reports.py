"""Commands build plain reports without printing; the renderers give main's output."""

from __future__ import annotations

import asyncio

from journal import Journal
from journal.cli.commands import list_threads, show_diff, show_state, verify_threads
from journal.cli.options import DiffOptions, LsOptions, StateOptions, VerifyOptions
from journal.cli.render_json import render_json
from journal.cli.render_text import render_text
from journal.cli.reports import DiffReport, LsReport, StateReport, VerifyThreadsReport
from tests.cli.test_commands import KEY, THREAD, build_root, run


async def _reports(root):
    journal = Journal.open(root, fsync=False)
    try:
        return (
            await list_threads(journal, LsOptions(root=str(root))),
            await show_state(journal, StateOptions(root=str(root), key=KEY, at=3)),
            await show_diff(journal, DiffOptions(root=str(root), key=KEY)),
            await verify_threads(journal, VerifyOptions(root=str(root))),
        )
    finally:
        await journal.aclose()


def test_commands_return_reports_that_render_as_main_prints(tmp_path, capsys):
    root = build_root(tmp_path / "journal")
    ls, state, diff, verify = asyncio.run(_reports(root))
    assert capsys.readouterr() == ("", "")  # the commands printed nothing

    assert isinstance(ls, LsReport)
    assert (ls.threads[0].key, ls.threads[0].head) == (KEY, 7)
    assert isinstance(state, StateReport)
    assert (state.version, state.head, len(state.state.context)) == (3, 7, 2)
    assert isinstance(diff, DiffReport)
    assert (diff.start, diff.stop) == (6, 7)
    assert isinstance(verify, VerifyThreadsReport)
    assert verify.ok

    base = ["--root", str(root)]
    assert render_text(ls) == run(capsys, *base, "ls")[1]
    assert render_text(state) == run(capsys, *base, "state", *THREAD, "--at", "3")[1]
    json_doc = render_json(diff, indent=False)  # captured output is no terminal
    assert json_doc is not None
    assert json_doc.decode() + "\n" == run(capsys, *base, "--json", "diff", *THREAD)[1]
    assert render_text(verify) == run(capsys, *base, "verify")[1]
