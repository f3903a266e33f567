"""The job console answers a question in headless Chromium: a job parks on ``book_trip``'s
question, the console shows it with its schema, a person types the answer, the job goes on.

Skipped without Chromium, except in CI. The screenshot of the question is written to
``$TANDEM_TEST_ARTIFACTS`` (default ``.artifacts/``) as ``console-question.png``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cdp import Browser
from tests.integration.conftest import Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess
from tests.integration.test_console_browser import ARTIFACTS, chromium  # noqa: F401 - the fixture
from tests.integration.test_decide import any_host
from tests.integration.test_durability import runs

pytestmark = pytest.mark.integration


@pytest.fixture
def question_api(redis_base: str) -> Iterator[tuple[Cluster, ApiProcess]]:
    gen = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.tools:questions_toolkit",
        TANDEM_API_TOKENS="",
        TANDEM_STALL_SECONDS="1",
        TANDEM_LEASE_SECONDS="2",
    )
    cluster, _, actor = next(gen)
    actor.set_script(any_host)
    cluster.start("thinker", "actor", "tools")
    server = ApiProcess(cluster.env)
    try:
        yield cluster, server
    finally:
        server.stop()
        gen.close()


def test_the_console_shows_a_question_and_sends_the_answer(
    chromium: str,  # noqa: F811
    question_api: tuple[Cluster, ApiProcess],
) -> None:
    cluster, server = question_api
    plan = [[{"name": "book_trip", "args": {}}]]
    handle = cluster.submit(goal=goal_with_plan("trip", plan), reasoner="mono", max_rounds=3)
    browser = Browser(f"{server.url}/?job={handle.id}", chromium)
    try:
        page = browser.page()
        page.wait_for(
            "!!document.querySelector('#question') && !document.querySelector('#question').hidden", 60
        )
        assert page.evaluate("document.querySelector('#question-text').textContent") == (
            "Which city should the trip go to?"
        )
        assert '"required":["city"]' in page.evaluate(
            "document.querySelector('#question-schema').textContent"
        )
        assert page.evaluate("document.querySelector('#question-pause').textContent") == (
            f"pause {handle.id}:0:tools:1"
        )
        assert page.evaluate("document.querySelector('#job-state').textContent") == "awaiting a person"
        page.evaluate("document.querySelector('#answer-input').value = '{\"city\": 7}'; true")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "console-question.png").write_bytes(page.screenshot())
        page.evaluate("document.querySelector('#answer-submit').click(); true")
        notice = "document.querySelector('#notice').textContent"
        said = page.wait_for(f"{notice}.includes('does not fit') ? {notice} : ''", 30)
        assert "field 'city': 7 is not of type 'string'" in said  # refused: the form stays
        assert page.evaluate("document.querySelector('#question').hidden") is False
        page.evaluate("document.querySelector('#answer-input').value = '{\"city\": \"Oslo\"}'; true")
        page.evaluate("document.querySelector('#answer-submit').click(); true")
        page.wait_for("document.querySelector('#job-state').textContent === 'completed'", 60)
        assert page.evaluate("document.querySelector('#question').hidden") is True
        tools = page.evaluate("Array.from(document.querySelectorAll('.tool')).map(n => n.textContent)")
        assert any("booked a trip to Oslo" in t for t in tools), tools
        assert [r["city"] for r in runs(cluster, handle.id, "book_trip")] == ["Oslo"]
        page.close()
    finally:
        browser.close()
