"""The inspector's page in a real browser (Debian's chromium through Playwright): the
list, a transcript with tool calls, runs and lineage, live events from another process,
a reconnect without gap or duplicate, time travel, a fork from the page, and a hostile
transcript that runs nothing. One browser for the module; every test a page of its own."""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from browser_support import BrowserThread, PageWatch
from inspector_support import HOSTILE, awaiting_run, fill, inspector
from playwright.sync_api import Browser, Page

from runtime import NewEvent, Runtime, StatsProjection, open_runtime
from runtime.agents import (
    AssistantMessage,
    Entry,
    SidecarEntry,
    ToolCall,
    ToolResult,
    UserMessage,
    agent_projections,
    checkpoints,
    history,
)

pytestmark = pytest.mark.slow

#: Where the README's screenshot goes when this is set (``TIDELOG_SCREENSHOT=docs/...``).
SCREENSHOT = os.environ.get("TIDELOG_SCREENSHOT")
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserThread]:
    """One chromium for the whole module."""
    thread = BrowserThread()
    yield thread
    thread.close()


async def open_page(browser: BrowserThread, url: str) -> tuple[Page, PageWatch]:
    def make(b: Browser) -> tuple[Page, PageWatch]:
        page = b.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(WAIT_MS)
        watch = PageWatch(page)
        page.goto(url)
        page.wait_for_selector("#status:not(:text('connecting'))")
        return page, watch

    return await browser.run(make)


async def filled(address: Path) -> None:
    """Give ``address`` :func:`fill`'s sessions with a runtime of its own (closed after:
    its leases released for the other processes of the tests)."""
    async with open_runtime(address) as rt:
        await fill(rt)


def with_projections(rt: Runtime) -> Runtime:
    for projection in agent_projections():
        rt.register_projection(projection)
    return rt


def seqs(page: Page, selector: str = "#event-rows tr") -> list[int]:
    found: list[str] = page.eval_on_selector_all(selector, "rows => rows.map(r => r.dataset.seq)")
    return [int(s) for s in found]


def attached(page: Page, selector: str) -> None:
    """Wait until ``selector`` is in the page (shown or in a hidden tab)."""
    page.wait_for_selector(selector, state="attached")


def show(page: Page, session_id: str, at: int | None = None) -> None:
    fragment = {"s": session_id} if at is None else {"s": session_id, "at": str(at)}
    page.evaluate("h => { location.hash = h }", urllib.parse.urlencode(fragment))
    page.wait_for_function(
        "id => document.getElementById('session-id').textContent === id", arg=session_id
    )


async def test_list_transcript_runs_and_lineage(browser: BrowserThread, tmp_path: Path) -> None:
    """The list shows the sessions; a conversation renders as messages with each tool
    call beside its result, run boundaries and sidecar records; runs show their status,
    pending calls and unknown outcomes; a fork shows its parent, the parent its forks."""
    db = tmp_path / "app.db"
    await filled(db)
    async with open_runtime(db) as rt, inspector(with_projections(rt)) as server:
        page, watch = await open_page(browser, server.url)

        def walk(_: Browser) -> dict[str, Any]:
            page.wait_for_selector('#sessions li[data-id="notes"]')
            listed = page.eval_on_selector_all("#sessions li", "l => l.map(i => i.dataset.id)")
            page.click('#sessions li[data-id="chat"] a')
            page.wait_for_selector('#transcript [data-seq="10"]', state="attached")
            user = page.text_content('#transcript .msg.user[data-seq="1"] .body')
            tool = page.locator('#transcript .tool[data-seq="3"]')
            tool_text = tool.text_content()
            result = tool.locator(".result").text_content()
            boundaries = page.eval_on_selector_all(
                "#transcript .boundary", "l => l.map(b => b.textContent)"
            )
            sidecar = page.text_content('#transcript .sidecar[data-seq="4"]')
            forks = page.text_content("#forks")
            fork_form_hidden = page.is_hidden("#fork-form")  # read-only: no fork control
            if SCREENSHOT:
                page.screenshot(path=SCREENSHOT)
            page.click('.tabs button[data-tab="runs"]')
            page.wait_for_selector('#runs [data-run="r3"]')
            runs = {
                run: page.text_content(f'#runs [data-run="{run}"]') for run in ("r1", "r3", "r4")
            }
            controls_hidden = page.is_hidden("#run-controls") and not page.query_selector(
                "#runs button"
            )
            page.click('.tabs button[data-tab="transcript"]')
            page.click("#forks a")
            page.wait_for_function(
                "() => document.getElementById('session-id').textContent === 'chat-fork'"
            )
            page.wait_for_selector('#transcript [data-seq="4"]', state="attached")
            lineage = page.text_content("#lineage")
            fork_seqs = seqs(page)
            return {
                "listed": listed,
                "user": user,
                "tool": tool_text,
                "result": result,
                "boundaries": boundaries,
                "sidecar": sidecar,
                "forks": forks,
                "runs": runs,
                "lineage": lineage,
                "fork_seqs": fork_seqs,
                "fork_form_hidden": fork_form_hidden,
                "controls_hidden": controls_hidden,
            }

        got = await browser.run(walk)
        await browser.run(lambda _: page.close())
    assert got["listed"] == ["chat", "chat-fork", "notes"]
    assert got["user"] == "When is high tide?"
    assert "lookup" in got["tool"]
    assert '"q": "tide tables"' in got["tool"]
    assert "06:12 and 18:40" in got["result"]
    assert got["boundaries"] == [
        "run r1",
        "end of run r1 (its entries are in the history)",
        "run r2",
        "end of run r2 (its entries are in the history)",
    ]
    assert "tool_started" in got["sidecar"]
    assert "call-1" in got["sidecar"]
    assert "chat-fork (at 4)" in got["forks"]
    assert "completed" in got["runs"]["r1"]
    assert "interrupted" in got["runs"]["r3"]
    assert "pending tool call send_mail (call-3)" in got["runs"]["r3"]
    assert "failed" in got["runs"]["r4"]
    assert "outcome unknown after a crash: call call-4" in got["runs"]["r4"]
    assert got["lineage"] == "forked from chat at seq 4"
    assert got["fork_seqs"] == [1, 2, 3, 4]
    assert got["fork_form_hidden"] is True
    assert got["controls_hidden"] is True  # read-only: no run controls
    assert watch.dialogs == []
    assert watch.foreign == []
    assert watch.errors == []


APPEND = """
import sys, trio
from runtime import NewEvent, open_runtime

async def main():
    async with open_runtime(sys.argv[1]) as rt:
        async with rt.open_session("notes") as writer:
            await writer.append([NewEvent("note", {"n": n}) for n in (6, 7)])

trio.run(main)
"""


async def test_live_events_from_another_process_and_a_reconnect(
    browser: BrowserThread, tmp_path: Path
) -> None:
    """Events committed by another process appear live, in order; when the server goes
    away and comes back, the page resumes after the last event it had: no gap, no
    duplicate."""
    db = tmp_path / "app.db"
    await filled(db)
    async with open_runtime(db) as rt:
        async with inspector(rt) as server:
            page, watch = await open_page(browser, f"{server.url}#s=notes")
            await browser.run(
                lambda _: page.wait_for_selector('#transcript [data-seq="5"]', state="attached")
            )
            await browser.run(lambda _: page.wait_for_selector("#status.live"))
            await trio.run_process([sys.executable, "-c", APPEND, str(db)])
            await browser.run(
                lambda _: page.wait_for_selector('#event-rows [data-seq="7"]', state="attached")
            )
            assert await browser.run(lambda _: seqs(page)) == [1, 2, 3, 4, 5, 6, 7]
            port = server.port
        # The server is gone (the stream dropped); events commit meanwhile.
        await browser.run(lambda _: page.wait_for_selector("#status.down"))
        async with rt.open_session("notes") as writer:
            await writer.append([NewEvent("note", {"n": n}) for n in (8, 9)])
        async with inspector(rt, port=port):
            await browser.run(
                lambda _: page.wait_for_selector('#event-rows [data-seq="9"]', state="attached")
            )
            async with rt.open_session("notes") as writer:
                await writer.append([NewEvent("note", {"n": 10})])
            await browser.run(
                lambda _: page.wait_for_selector('#event-rows [data-seq="10"]', state="attached")
            )
            rows = await browser.run(lambda _: seqs(page))
            transcript = await browser.run(lambda _: seqs(page, "#transcript [data-seq]"))
            await browser.run(lambda _: page.close())
    assert rows == list(range(1, 11))
    assert transcript == list(range(1, 11))
    assert watch.dialogs == []


async def test_time_travel_shows_exactly_the_first_n_events_and_the_values_at_n(
    browser: BrowserThread, tmp_path: Path
) -> None:
    """Viewing as of seq N shows exactly events 1..N and the projection values folded up
    to N; back to live shows everything again. A long session opens at its end and loads
    earlier events as the user scrolls up."""
    db = tmp_path / "app.db"
    await filled(db)
    async with open_runtime(db) as rt:
        async with rt.open_session("long") as writer:
            await writer.append([NewEvent("tick", {"i": i}) for i in range(1, 501)])
        async with rt.snapshot("chat") as snap:
            first5 = await snap.read(until_seq=5)
        stats = StatsProjection()
        state = stats.init()
        for event in first5:
            state = stats.apply(state, event)
        expected = stats.view(state)
        async with inspector(with_projections(rt)) as server:
            page, _ = await open_page(browser, f"{server.url}#s=chat")

            def travel(_: Browser) -> dict[str, Any]:
                page.wait_for_selector('#event-rows [data-seq="10"]', state="attached")
                page.fill("#at", "5")
                page.click("#view-at")
                page.wait_for_selector("#status.paused")
                page.wait_for_function(
                    "() => document.querySelectorAll('#event-rows tr').length === 5"
                )
                at5 = seqs(page)
                transcript = seqs(page, "#transcript [data-seq]")
                page.click('.tabs button[data-tab="values"]')
                values = page.text_content('#values [data-projection="stats"] pre')
                conversation = page.text_content('#values [data-projection="conversation"] pre')
                viewing = page.text_content("#viewing")
                page.click("#live")
                page.wait_for_selector("#status.live")
                page.wait_for_function(
                    "() => document.querySelectorAll('#event-rows tr').length === 10"
                )
                live = seqs(page)
                show(page, "long")
                page.click('.tabs button[data-tab="events"]')
                page.wait_for_selector('#event-rows [data-seq="500"]', state="attached")
                opened = seqs(page)
                page.eval_on_selector("#events", "pane => { pane.scrollTop = 0 }")
                page.wait_for_selector('#event-rows [data-seq="200"]', state="attached")
                scrolled = seqs(page)
                return {
                    "at5": at5,
                    "transcript": transcript,
                    "values": values,
                    "conversation": conversation,
                    "viewing": viewing,
                    "live": live,
                    "opened": opened,
                    "scrolled": scrolled,
                }

            got = await browser.run(travel)
            await browser.run(lambda _: page.close())
    assert got["at5"] == [1, 2, 3, 4, 5]
    # Each event once (a tool result sits inside its call's card, so not in seq order).
    assert sorted(got["transcript"]) == [1, 2, 3, 4, 5]
    assert json.loads(got["values"]) == expected
    assert [m["role"] for m in json.loads(got["conversation"])] == ["user", "assistant", "tool"]
    assert got["viewing"] == "viewing as of seq 5 (head 10)"
    assert got["live"] == list(range(1, 11))
    assert got["opened"] == list(range(301, 501))
    assert got["scrolled"] == list(range(101, 501))


async def test_fork_from_the_page(browser: BrowserThread, tmp_path: Path) -> None:
    """With writes enabled, the page forks the session at the seq viewed into a new id
    (the token from the URL's fragment goes in a header) and opens the fork."""
    db = tmp_path / "app.db"
    await filled(db)
    async with open_runtime(db) as rt, inspector(rt, writes=True) as server:
        assert server.token is not None
        page, _ = await open_page(browser, f"{server.page_url}")

        def fork(_: Browser) -> tuple[str, str | None]:
            hash_after = page.evaluate("() => location.hash")
            show(page, "chat", 7)
            page.wait_for_selector("#status.paused")
            page.fill("#fork-id", "from-page")
            page.click("#fork")
            page.wait_for_function(
                "() => document.getElementById('session-id').textContent === 'from-page'"
            )
            attached(page, '#transcript [data-seq="7"]')
            return hash_after, page.text_content("#lineage")

        hash_after, lineage = await browser.run(fork)
        await browser.run(lambda _: page.close())
        info = await rt.stat("from-page")
    assert "token" not in hash_after  # taken out of the address bar
    assert info is not None
    assert info.parent == ("chat", 7)
    assert info.head == 7
    assert lineage == "forked from chat at seq 7"


async def test_approve_a_pending_call_from_the_page(browser: BrowserThread, tmp_path: Path) -> None:
    """The runs view shows a run awaiting approval with approve / reject controls (writes
    enabled); approving from the page records the decision, the view shows it, and the
    run's checkpoint session shows the decision event."""
    db = tmp_path / "app.db"
    async with open_runtime(db) as rt:
        await awaiting_run(rt)
        async with inspector(rt, writes=True) as server:
            page, watch = await open_page(browser, f"{server.page_url}")

            def decide(_: Browser) -> dict[str, Any]:
                show(page, "office")
                page.click('.tabs button[data-tab="runs"]')
                box = '#runs [data-run="pay-run"]'
                page.wait_for_selector(f'{box} .approval[data-call="c-pay"] button.approve')
                before = page.text_content(box)
                page.fill("#decider", "ada <b>")
                page.click(f'{box} .approval[data-call="c-pay"] button.approve')
                page.wait_for_selector(f"{box} .decision")
                after = page.text_content(box)
                result = page.text_content("#control-result")
                controls_left = page.locator(f"{box} .approval").count()
                page.click(f"{box} a.checkpoint")
                page.wait_for_function(
                    "() => document.getElementById('session-id').textContent"
                    " === 'tidelog/run/pay-run'"
                )
                page.click('.tabs button[data-tab="events"]')
                attached(page, "#event-rows tr")
                kinds: list[str] = page.eval_on_selector_all(
                    "#event-rows tr", "rows => rows.map(r => r.children[1].textContent)"
                )
                return {
                    "before": before,
                    "after": after,
                    "result": result,
                    "left": controls_left,
                    "kinds": kinds,
                }

            got = await browser.run(decide)
            await browser.run(lambda _: page.close())
        snap = await checkpoints(rt).load("pay-run")
    assert snap is not None
    recorded = [
        e for e in snap.entries if isinstance(e, SidecarEntry) and e.kind == "approval_decision"
    ]
    assert len(recorded) == 1
    assert isinstance(recorded[0].data, dict)
    assert recorded[0].data["by"] == "ada <b>"
    assert recorded[0].data["approved"] is True
    assert "awaiting_approval" in got["before"]
    assert "awaits approval: pay (c-pay)" in got["before"]
    assert "approved call c-pay by ada <b>" in got["after"]
    assert "approved call c-pay by ada <b>" in got["result"]
    assert got["left"] == 0
    assert got["kinds"].count("approval_decision") == 1
    assert watch.dialogs == []
    assert watch.errors == []


HOSTILE_ID = '<img src=x onerror="window.__pwned=9">'


async def test_a_hostile_transcript_runs_nothing(browser: BrowserThread, tmp_path: Path) -> None:
    """Markup, event handlers and javascript: URLs in messages, tool calls, results,
    sidecar records and session ids show as characters: no dialog opens, no script runs,
    no element is made from them."""
    db = tmp_path / "app.db"
    async with open_runtime(db) as rt:
        entries: list[Entry] = [
            UserMessage(HOSTILE[0]),
            AssistantMessage(HOSTILE[1], agent=HOSTILE[3]),
        ]
        entries += [ToolCall("c1", "x<b>y</b>", {"html": HOSTILE[2]})]
        entries += [ToolResult("c1", HOSTILE[1]), SidecarEntry("note<i>", {"v": HOSTILE[0]})]
        await history(rt).append(HOSTILE_ID, entries, run_id="<script>r</script>")
        async with inspector(rt) as server:
            quoted = urllib.parse.quote(HOSTILE_ID, safe="")
            page, watch = await open_page(browser, f"{server.url}#s={quoted}")

            def look(_: Browser) -> dict[str, Any]:
                page.wait_for_selector('#transcript [data-seq="6"]', state="attached")
                page.wait_for_selector("#sessions li")
                page.click('.tabs button[data-tab="events"]')
                page.click('.tabs button[data-tab="transcript"]')
                return {
                    "pwned": page.evaluate("() => window.__pwned === undefined"),
                    "text": page.text_content("#transcript"),
                    "list": page.text_content("#sessions"),
                    "title": page.text_content("#session-id"),
                    "made": page.eval_on_selector_all(
                        "main img, main script, main b, main i, main a[href^='javascript']",
                        "l => l.length",
                    ),
                    "events": page.text_content("#event-rows"),
                }

            got = await browser.run(look)
            await browser.run(lambda _: page.close())
    assert got["pwned"] is True  # window.__pwned was never set
    assert watch.dialogs == []
    assert watch.errors == []
    assert got["made"] == 0
    for text in (HOSTILE[0], HOSTILE[1], HOSTILE[3]):
        assert text in got["text"]
    assert json.dumps(HOSTILE[2]) in got["text"]  # tool arguments show as JSON text
    assert "x<b>y</b>" in got["text"]
    assert "note<i>" in got["text"]
    assert "run <script>r</script>" in got["text"]
    assert HOSTILE_ID in got["list"]
    assert got["title"] == HOSTILE_ID
    assert '\\"window.__pwned = 2' in got["events"]  # the raw JSON, as text
