"""The job console in headless Chromium: start the offline demo job, watch it, see its deliverable.

Skipped when Chromium is not installed, except in CI (``CI=true``), where that is a failure
(``.ci/run`` installs Debian's ``chromium``). The screenshot is written to
``$TANDEM_TEST_ARTIFACTS`` (default ``.artifacts/`` at the repository root) as ``console.png``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cdp import Browser, chromium_path
from tests.integration.conftest import _make_cluster
from tests.integration.test_api import ApiProcess

pytestmark = pytest.mark.integration

ARTIFACTS = Path(os.environ.get("TANDEM_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / ".artifacts"))


@pytest.fixture
def chromium() -> str:
    found = chromium_path()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: CI needs it (.ci/run installs Debian's chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


@pytest.fixture
def demo_api(redis_base: str) -> Iterator[ApiProcess]:
    """Workers with the offline demo model and tools, and ``tandem api`` on loopback, no tokens."""
    gen = _make_cluster(
        redis_base,
        TANDEM_THINKER_MODEL="",
        TANDEM_ACTOR_MODEL="",
        TANDEM_TOOLKIT="",
        TANDEM_API_TOKENS="",
        TANDEM_DELTA_INTERVAL_MS="0",  # every piece the demo model streams is its own event
    )
    cluster, _, _ = next(gen)
    cluster.start("thinker", "actor", "tools")
    server = ApiProcess(cluster.env)
    try:
        yield server
    finally:
        server.stop()
        gen.close()


def test_the_console_runs_the_demo_job_and_shows_its_deliverable(chromium: str, demo_api: ApiProcess) -> None:
    browser = Browser(f"{demo_api.url}/", chromium)
    try:
        page = browser.page()
        page.wait_for("document.readyState === 'complete' && !!document.querySelector('#submit')", 30)
        # The console runs under its Content-Security-Policy, which blocks any inline script.
        injected = (
            "const s = document.createElement('script'); s.textContent = 'window.inlineRan = true';"
            "document.body.appendChild(s); window.inlineRan === true"
        )
        assert page.evaluate(injected) is False
        # Count the updates of the replies' text while the job runs: tokens arrive piece by piece.
        page.evaluate(
            "window.textUpdates = 0; new MutationObserver((ms) => { window.textUpdates += ms.filter("
            "(m) => m.target.tagName === 'PRE').length; }).observe(document.querySelector('#rounds'), "
            "{subtree: true, childList: true, characterData: true}); true"
        )
        page.evaluate("document.querySelector('#submit').click()")

        shown = "document.querySelector('#outcome').hidden ? '' : "
        deliverable = page.wait_for(shown + "document.querySelector('#deliverable').textContent", 120)
        assert "84" in deliverable
        assert page.evaluate("document.querySelector('#job-state').textContent") == "completed"
        # 6 replies of about 40 streamed pieces each; the stored replies alone would be a few per reply.
        assert page.evaluate("window.textUpdates") > 60
        # An ended job offers nothing to cancel and asks nothing (test_console_states: every state).
        for gone in ("#cancel", "#question", "#approval"):
            assert page.evaluate(f"document.querySelector('{gone}').checkVisibility()") is False, gone
        rounds = page.evaluate("document.querySelectorAll('#rounds .round').length")
        assert rounds >= 2
        tools = page.evaluate("Array.from(document.querySelectorAll('.tool')).map(n => n.textContent)")
        assert any("word_count" in t and "7" in t for t in tools), tools
        instruction = page.evaluate("document.querySelector('.turn .content').textContent")
        assert instruction.startswith("instruction")
        # The job list shows it, and the URL names it (a reload reopens it).
        page.wait_for("document.querySelector('#jobs li.current .state.completed') !== null", 30)
        assert page.evaluate("location.search").startswith("?job=")

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        png = page.screenshot()
        assert png.startswith(b"\x89PNG")
        (ARTIFACTS / "console.png").write_bytes(png)
        page.close()
    finally:
        browser.close()


def test_the_console_resumes_a_truncated_job_with_more_rounds(chromium: str, demo_api: ApiProcess) -> None:
    browser = Browser(f"{demo_api.url}/", chromium)
    try:
        page = browser.page()
        page.wait_for("document.readyState === 'complete' && !!document.querySelector('#submit')", 30)
        page.evaluate("document.querySelector('#max-rounds').value = '1'; true")
        page.evaluate("document.querySelector('#submit').click()")
        state = "document.querySelector('#job-state').textContent"
        page.wait_for(f"{state} === 'truncated'", 120)
        assert page.evaluate("document.querySelector('#resume').hidden") is False
        page.evaluate("window.prompt = () => '6'; document.querySelector('#resume').click(); true")
        shown = "document.querySelector('#outcome').hidden ? '' : "
        page.wait_for(f"{state} === 'completed'", 120)
        deliverable = page.wait_for(shown + "document.querySelector('#deliverable').textContent", 30)
        assert "84" in deliverable
        assert page.evaluate("document.querySelector('#resume').hidden") is True
        page.close()
    finally:
        browser.close()


def test_the_console_sends_a_message_to_a_parked_job(chromium: str, demo_api: ApiProcess) -> None:
    browser = Browser(f"{demo_api.url}/", chromium)
    try:
        page = browser.page()
        page.wait_for("document.readyState === 'complete' && !!document.querySelector('#submit')", 30)
        # Every tool needs approval: the demo job parks at its first call, and takes messages there.
        page.evaluate(
            "fetch('/v1/jobs', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: "
            "JSON.stringify({goal: 'What is (17 * 23) + 4?', approve_tools: 'all', max_rounds: 8})})"
            ".then((r) => r.json()).then((job) => { openJob(job.id); return job.id; })"
        )
        page.wait_for("!document.querySelector('#approve').hidden", 120)
        shown = "getComputedStyle(document.querySelector('{}')).display !== 'none'"
        assert page.evaluate(shown.format("#message-form")) is True
        assert page.evaluate(shown.format("#follow-up-form")) is False
        page.evaluate(
            "document.querySelector('#message-text').value = 'Show the arithmetic step by step.';"
            "document.querySelector('#send-message').click(); true"
        )
        sent = page.wait_for(
            "Array.from(document.querySelectorAll('.turn.person .content'))"
            ".map((n) => n.textContent).join('|')",
            30,
        )
        assert sent == "Show the arithmetic step by step."
        assert "message sent: read at the start of round 2" in page.evaluate(
            "document.querySelector('#notice').textContent"
        )
        assert page.evaluate("document.querySelector('#message-text').value") == ""
        # The message opens round 2, where the Thinker reads it.
        assert page.evaluate("document.querySelector('.turn.person').closest('.round').id") == "round-1"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "console-message.png").write_bytes(page.screenshot())

        # Approve each pause until the job ends; the box goes once it has.
        approve_or_done = (
            "(() => { if (!document.querySelector('#outcome').hidden) return true;"
            " const b = document.querySelector('#approve'); if (!b.hidden) b.click(); return false; })()"
        )
        page.wait_for(approve_or_done, 180, poll=1.0)
        assert page.evaluate("document.querySelector('#job-state').textContent") == "completed"
        assert page.evaluate(shown.format("#message-form")) is False  # the job has ended
        assert page.evaluate(shown.format("#follow-up-form")) is True

        # A follow-up on the ended job: a new job in its thread, the thread listed on its page.
        first = page.evaluate("state.jobId")
        page.evaluate(
            "document.querySelector('#follow-up-goal').value = 'What is (17 * 23) + 10?';"
            "document.querySelector('#send-follow-up').click(); true"
        )
        page.wait_for(f"state.jobId && state.jobId !== '{first}'", 30)
        page.wait_for(approve_or_done, 180, poll=1.0)
        thread = page.wait_for(
            "document.querySelector('#thread').hidden ? null : Array.from("
            "document.querySelectorAll('#thread-jobs li')).map((n) => n.textContent)",
            30,
        )
        assert len(thread) == 2 and "(17 * 23) + 4" in thread[0] and "(17 * 23) + 10" in thread[1], thread
        assert page.evaluate("document.querySelector('#thread-jobs li.current').textContent") == thread[1]
        (ARTIFACTS / "console-thread.png").write_bytes(page.screenshot())
        page.close()
    finally:
        browser.close()
