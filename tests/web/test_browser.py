"""The web UI in a real browser: headless Chromium (Debian's package) via Playwright.

Each test starts ``agent-journal ui`` as a process on a free loopback port over a
journal holding the demo's incident, then clicks through it the way an operator
would: threads list -> the thread with the badge -> its timeline -> the run -> the
uncertain tool call -> the state before the run -> the diff -> verify. Nothing
downloads a browser: the tests launch ``AJ_CHROMIUM`` (default /usr/bin/chromium)
and fail, never skip, when it cannot start.

``AJ_UI_SCREENSHOT=docs/ui-timeline.png`` keeps the timeline's screenshot there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect, sync_playwright

from journal import Journal, MessageAppended, Msg, ThreadKey
from tests.services.s3 import CREDENTIALS, make_bucket, s3_server  # noqa: F401
from tests.web.incident import (
    HOSTILE_KEY,
    INCIDENT_CALL,
    INCIDENT_RUN,
    LONG_RUNS,
    XSS_TEXT,
    build_hostile,
    build_incident,
    build_long,
    long_run,
    settle_incident,
)

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("AJ_CHROMIUM", "/usr/bin/chromium")
SCREENSHOT_ENV = "AJ_UI_SCREENSHOT"
WAIT_MS = 30_000
_START_TIMEOUT = 60.0
DASH = "\u2013"  # the page's ranges of versions: v1-v5 with an en dash


@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM):
        pytest.fail(
            f"no Chromium at {CHROMIUM}: install Debian's package "
            "(apt-get install chromium) or set AJ_CHROMIUM"
        )
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True
            )
        except PlaywrightError as exc:
            pytest.fail(f"Chromium at {CHROMIUM} did not start: {exc}")
        try:
            yield chromium
        finally:
            chromium.close()


@contextlib.contextmanager
def ui_server(root: str, *flags: str, cwd: Path = REPO):
    """``agent-journal ui`` on a free loopback port, run in ``cwd``; yields its URL."""
    command = [
        sys.executable, "-m", "journal", "--root", root, *flags,
        "ui", "--port", "0", "--poll", "0.2",
    ]  # fmt: skip
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    # A server that neither prints nor exits must not hang the run.
    watchdog = threading.Timer(_START_TIMEOUT, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        watchdog.cancel()
        found = re.search(r"at (http://127\.0\.0\.1:\d+/)", line)
        if found is None:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            pytest.fail(f"agent-journal ui did not start: {line!r} {err!r}")
        yield found.group(1)
    finally:
        watchdog.cancel()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Watch:
    """What must never happen on the page: a dialog, a script error."""

    def __init__(self, page) -> None:
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def check(self) -> None:
        assert self.dialogs == [], f"a dialog opened: {self.dialogs}"
        assert self.errors == [], f"script errors: {self.errors}"


_RENDERED = (
    "(before) => Number(document.body.dataset.rendered || 0) > before"
    " && !document.body.dataset.loading"
)


def _seq(page) -> int:
    return int(page.evaluate("() => Number(document.body.dataset.rendered || 0)"))


def _rendered(page, before: int = 0) -> None:
    """Wait until the page has rendered past render number ``before``."""
    page.wait_for_function(_RENDERED, arg=before, timeout=WAIT_MS)


def _go(page, action) -> None:
    """Do ``action`` (a click, a fill) and wait for the view it leads to."""
    before = _seq(page)
    action()
    _rendered(page, before)


def in_thread(make):
    """``asyncio.run(make())`` in a thread of its own: Playwright's sync API runs
    an event loop in this one, and ``asyncio.run`` refuses to nest in it."""
    result: list[object] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(asyncio.run(make()))
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    return result[0]


def _append_message(root: str, key, text: str, options: dict | None = None) -> None:
    """Commit one message to ``key``, as another process's writer would."""

    async def append() -> None:
        journal = Journal.open(root, **(options or {}))
        try:
            async with journal.writer(key, holder="live-writer") as w:
                await w.append([MessageAppended(Msg("user", text))])
        finally:
            await journal.aclose()

    in_thread(append)


def _click_through(page, url: str, incident, *, screenshot: Path | None) -> None:
    """Threads, badge, timeline, run, uncertain call, state, diff, verify."""
    label = f"demo/assistant/alice/{incident.key.session_id}/{incident.key.thread_id}"
    page.goto(url)
    _rendered(page)
    row = page.get_by_test_id("thread-row").filter(has_text=label)
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("badge-uncertain")).to_have_text("uncertain call \u00d71")
    expect(row.get_by_test_id("badge-interrupted")).to_be_visible()

    # Only the threads that need attention.
    _go(page, lambda: page.get_by_test_id("filter-attention").check())
    expect(page.get_by_test_id("thread-row")).to_have_count(1)
    expect(page.get_by_test_id("thread-row")).to_contain_text(label)

    _go(page, lambda: page.get_by_test_id("thread-link").filter(has_text=label).click())
    expect(page.get_by_test_id("thread-label")).to_have_text(label)
    expect(page.get_by_test_id("record")).to_have_count(incident.head)

    _go(
        page,
        lambda: page.locator(
            f"[data-testid=run-link][data-run='{INCIDENT_RUN}']"
        ).click(),
    )
    run = page.get_by_test_id("run-detail")
    expect(run).to_contain_text(f"Run {INCIDENT_RUN}")
    expect(run.get_by_test_id("status").first).to_have_text("interrupted")
    expect(page.locator(".segment.selected").first).to_contain_text("RunInterrupted")

    _go(
        page,
        lambda: page.locator(
            f"[data-testid=call-link][data-call='{INCIDENT_CALL}']"
        ).click(),
    )
    call = page.get_by_test_id("call-detail")
    expect(call).to_contain_text("send_email")
    expect(call.get_by_test_id("status")).to_have_text("uncertain")
    expect(call.get_by_test_id("call-help")).to_contain_text("may or may not have run")
    expect(call).to_contain_text("bob@example.com")
    if screenshot is not None:
        page.screenshot(path=str(screenshot))

    before = incident.run_started_at - 1
    _go(page, lambda: page.get_by_test_id("state-before-run").click())
    expect(page.get_by_test_id("state-title")).to_contain_text(f"State as of v{before}")
    expect(page.get_by_test_id("active-run")).to_have_text("none")
    messages = page.get_by_test_id("message")
    expect(messages.filter(has_text="Should I pack an umbrella?")).to_have_count(1)
    expect(messages.last).to_contain_text("sunny in Paris, as I found earlier")
    expect(page.get_by_text("Email Bob the forecast.")).to_have_count(0)

    # The slider travels to any version.
    _go(page, lambda: page.get_by_test_id("version-slider").fill("3"))
    expect(page.get_by_test_id("state-title")).to_contain_text("State as of v3")
    _go(page, lambda: page.go_back())
    expect(page.get_by_test_id("state-title")).to_contain_text(f"State as of v{before}")

    _go(page, lambda: page.get_by_test_id("diff-to-head").click())
    expect(page.get_by_test_id("diff-title")).to_have_text(
        f"Diff v{before} → v{incident.head}"
    )
    expect(page.get_by_test_id("diff-changes")).to_contain_text("shutdown_interrupted")
    expect(page.get_by_text("Email Bob the forecast.").first).to_be_visible()

    _go(page, lambda: page.get_by_test_id("nav-verify").click())
    expect(page.get_by_test_id("verify-status")).to_have_text("ok")
    expect(page.get_by_test_id("verify-records")).to_have_text(str(incident.head))


# --- local root -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("browser") / "journal")

    async def build():
        incident = await build_incident(root)
        await build_hostile(root)
        return incident

    return root, in_thread(build)


def test_an_operator_clicks_through_the_incident(browser, local_root, tmp_path):
    root, incident = local_root
    wanted = os.environ.get(SCREENSHOT_ENV)
    shot = Path(wanted) if wanted else tmp_path / "ui-timeline.png"
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    watch = Watch(page)
    # A relative root, so the page (and the screenshot) shows no machine path.
    with ui_server("journal", cwd=Path(root).parent) as url:
        _click_through(page, url, incident, screenshot=shot)
    watch.check()
    assert shot.stat().st_size > 10_000


def test_the_timeline_updates_live(browser, local_root):
    root, incident = local_root
    # bob's thread: the other tests read alice's and must find it as built.
    bob = ThreadKey(
        incident.key.agent_id,
        incident.key.session_id,
        "bob",
        namespace=incident.key.namespace,
    )
    page = browser.new_page()
    watch = Watch(page)
    with ui_server(root) as url:
        page.goto(url)
        _rendered(page)
        link = page.get_by_test_id("thread-link").filter(has_text="/bob/")
        _go(page, link.click)
        expect(page.get_by_test_id("live")).to_have_text("live", timeout=WAIT_MS)
        records = page.get_by_test_id("record").count()
        _append_message(root, bob, "a record that arrived while watching")
        summary = page.locator(
            ".esummary", has_text="a record that arrived while watching"
        )
        expect(summary).to_be_visible(timeout=WAIT_MS)
        # The writer's fence and the message: two records more.
        expect(page.get_by_test_id("record")).to_have_count(records + 2)
    watch.check()


def test_agent_content_stays_text(browser, local_root):
    root, _ = local_root
    page = browser.new_page()
    watch = Watch(page)
    with ui_server(root) as url:
        page.goto(url)
        _rendered(page)
        # The hostile ids are shown as text in the threads list (a "/" inside an
        # id is escaped as %2F, so the path the CLI accepts can be pasted back).
        row = page.get_by_test_id("thread-row").filter(has_text="hostile/")
        expect(row).to_contain_text(HOSTILE_KEY.session_id.replace("/", "%2F"))
        expect(row).to_contain_text(HOSTILE_KEY.user_id or "")
        _go(page, lambda: row.get_by_test_id("thread-link").click())
        expect(page.get_by_test_id("thread-label")).to_contain_text(
            HOSTILE_KEY.session_id.replace("/", "%2F")
        )
        expect(page.get_by_text(XSS_TEXT, exact=False).first).to_be_visible()
        _go(page, lambda: page.get_by_test_id("run-link").first.click())
        _go(page, lambda: page.get_by_test_id("call-link").first.click())
        expect(page.get_by_test_id("call-detail")).to_contain_text(
            "<svg onload=alert(1)>"
        )
        expect(page.get_by_test_id("call-detail")).to_contain_text("window.__pwned")
        _go(page, lambda: page.get_by_test_id("nav-state").click())
        expect(page.get_by_test_id("message").first).to_have_text(
            re.compile(re.escape(XSS_TEXT))
        )
        # Nothing the agent wrote became an element, and nothing ran.
        for tag in ("img", "script", "svg", "b", "i"):
            assert page.locator(f"#app {tag}").count() == 0, tag
        assert page.evaluate("window.__pwned") is None
    watch.check()


def test_a_long_timeline_pages_through_its_records(browser, tmp_path):
    root = str(tmp_path / "journal")
    in_thread(lambda: build_long(root))
    head = 2 * LONG_RUNS + 1
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    watch = Watch(page)
    with ui_server(root) as url:
        page.goto(url)
        _rendered(page)
        _go(page, lambda: page.get_by_test_id("thread-link").click())
        window = page.get_by_test_id("window")
        newest = f"records v{head - 199}{DASH}v{head} of v1{DASH}v{head}"
        expect(window).to_have_text(newest)
        expect(page.get_by_test_id("record")).to_have_count(200)
        expect(page.get_by_test_id("record").last).to_have_attribute(
            "data-version", str(head)
        )
        expect(page.get_by_test_id("runs-shown")).to_contain_text(
            f"{LONG_RUNS} runs in this thread"
        )
        expect(page.get_by_test_id("later-records")).to_have_count(0)

        _go(page, lambda: page.get_by_test_id("earlier-records").click())
        expect(window).to_have_text(f"records v1{DASH}v{head - 200} of v1{DASH}v{head}")
        expect(page.get_by_test_id("record")).to_have_count(head - 200)
        expect(page.get_by_test_id("earlier-records")).to_have_count(0)
        expect(
            page.locator(
                f"[data-testid=run-link][data-run='{long_run(LONG_RUNS - 1)}']"
            )
        ).to_have_count(0)

        # A run of this page: its records are shown and marked, its panel open.
        _go(
            page,
            lambda: page.locator(
                f"[data-testid=run-link][data-run='{long_run(5)}']"
            ).click(),
        )
        expect(page.get_by_test_id("run-detail")).to_contain_text(f"Run {long_run(5)}")
        expect(page.locator(".segment.selected")).to_contain_text("ToolCallCompleted")

        _go(page, lambda: page.get_by_test_id("newest-records").click())
        expect(window).to_have_text(newest)
        expect(page.get_by_test_id("run-detail")).to_contain_text(f"Run {long_run(5)}")

        # A diff over the whole thread lists its last page of records and links
        # to the timeline for the others.
        _go(page, lambda: page.get_by_test_id("nav-diff").click())
        page.get_by_test_id("diff-from").fill("0")
        _go(page, lambda: page.get_by_test_id("diff-show").click())
        expect(page.get_by_test_id("diff-records-shown")).to_contain_text(
            "the last 200 shown"
        )
        expect(page.get_by_test_id("record")).to_have_count(200)
        expect(page.get_by_test_id("last-shown")).to_have_text("the last 200 shown")
        _go(page, lambda: page.get_by_test_id("diff-earlier-records").click())
        expect(window).to_have_text(f"records v1{DASH}v{head - 200} of v1{DASH}v{head}")

        # The state's context: its last page, and all of it on demand.
        _go(page, lambda: page.get_by_test_id("nav-state").click())
        expect(page.get_by_test_id("messages-shown")).to_contain_text(
            "the last 200 shown"
        )
        expect(page.get_by_test_id("message")).to_have_count(200)
        _go(page, lambda: page.get_by_test_id("all-messages").click())
        expect(page.get_by_test_id("message")).to_have_count(2 * LONG_RUNS)
        expect(page.get_by_test_id("messages-shown")).to_have_count(0)
    watch.check()


# --- S3 root --------------------------------------------------------------------------


@pytest.mark.s3
def test_the_incident_on_an_s3_root(browser, s3_server, tmp_path):
    bucket = in_thread(lambda: make_bucket(s3_server))
    root = f"s3://{bucket}/journal"
    options = {"endpoint_url": s3_server, **CREDENTIALS}
    incident = in_thread(lambda: build_incident(root, options))
    flags = [
        "--option", f"endpoint_url={s3_server}",
        "--option", f"key={CREDENTIALS['key']}",
        "--option", f"secret={CREDENTIALS['secret']}",
        "--option",
        f"client_kwargs.region_name={CREDENTIALS['client_kwargs']['region_name']}",
    ]  # fmt: skip
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    watch = Watch(page)
    with ui_server(root, *flags) as url:
        _click_through(page, url, incident, screenshot=None)
        # Settled (by the application, or `agent-journal reconcile`) while the
        # operator looks at the call: the page follows.
        params = (
            f"#/thread?namespace=demo&agent_id=assistant&user_id=alice"
            f"&session_id={incident.key.session_id}&thread_id=main"
            f"&run={INCIDENT_RUN}&call={INCIDENT_CALL}"
        )
        _go(page, lambda: page.goto(url + params))
        call = page.get_by_test_id("call-detail")
        expect(call.get_by_test_id("status")).to_have_text("uncertain")
        expect(page.get_by_test_id("live")).to_have_text("live", timeout=WAIT_MS)
        in_thread(lambda: settle_incident(root, options))
        expect(call.get_by_test_id("status")).to_have_text(
            "reconciled", timeout=WAIT_MS
        )
        expect(call).to_contain_text("not sent")
        expect(page.get_by_test_id("badge-uncertain")).to_have_count(0)
    watch.check()
