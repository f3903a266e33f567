"""The job console's review of a job, in headless Chromium (issue 26, item 7): each waiting call
approved or rejected on its own, its arguments edited and checked (the console's check and the
API's refusal shown next to the call), the "awaiting a person" badge, the goal in the job list,
a fork with a new goal, and the Actor's action summarised when a payload holds ``</function_call>``.

Screenshots go to ``$TANDEM_TEST_ARTIFACTS`` (default ``.artifacts/``): ``console-review-*.png``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cdp import Browser, Page
from tests.integration.conftest import Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess
from tests.integration.test_console_browser import ARTIFACTS, chromium  # noqa: F401 - a fixture
from tests.integration.test_durability import runs

pytestmark = pytest.mark.integration

STATIC = Path(__file__).resolve().parents[2] / "workers" / "api" / "static"
TWO_NOTIFIES = [[{"name": "notify", "args": {"to": "ops"}}, {"name": "notify", "args": {"to": "eve"}}]]
ACTION = (
    "<action>Writing the file.\n<function_call>\n"
    '{"name": "write_file", "call_objective": "save it", "args": {"path": "t.py", "code": __PAYLOAD_START__\n'
    'print("</function_call> and </action>")\n'
    "__PAYLOAD_END__}}\n</function_call>\n"
    '<function_call>{"name": "note", "args": {"text": "with </function_call> in it"}}</function_call>\n'
    "Then I run it.</action>"
)


@pytest.fixture
def plan_api(redis_base: str) -> Iterator[tuple[Cluster, ApiProcess]]:
    """Workers on the plan-following model hosts (``notify`` needs approval) and ``tandem api``."""
    gen = _make_cluster(redis_base, TANDEM_API_TOKENS="", TANDEM_STALL_SECONDS="2", TANDEM_LEASE_SECONDS="2")
    cluster, _, _ = next(gen)
    cluster.start("thinker", "actor", "tools")
    server = ApiProcess(cluster.env)
    try:
        yield cluster, server
    finally:
        server.stop()
        gen.close()


def _open(url: str, binary: str) -> tuple[Browser, Page]:
    browser = Browser(url, binary)
    page = browser.page()
    page.wait_for("document.readyState === 'complete' && typeof actionText === 'function'", 30)
    return browser, page


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = page.screenshot()
    assert png.startswith(b"\x89PNG")
    (ARTIFACTS / name).write_bytes(png)


def test_the_actor_summary_is_not_cut_by_a_payload_holding_the_closing_tag(chromium: str) -> None:  # noqa: F811
    browser, page = _open((STATIC / "index.html").as_uri(), chromium)
    try:
        summary = page.evaluate(f"actionText({json.dumps(ACTION)})")
        assert summary == "Writing the file.\n[tool call]\n[tool call]\nThen I run it."
        unclosed = page.evaluate('actionText(\'<action>go <function_call>{"name": "x"\')')
        assert unclosed == "go [tool call]"
    finally:
        browser.close()


def _card(index: int, what: str) -> str:
    return f"document.querySelector('#approval-calls .call-card[data-index=\"{index}\"] {what}')"


def test_each_call_is_decided_on_its_own_and_an_ended_job_forks_with_a_new_goal(
    chromium: str,  # noqa: F811
    plan_api: tuple[Cluster, ApiProcess],
) -> None:
    cluster, server = plan_api
    browser, page = _open(f"{server.url}/", chromium)
    try:
        goal = goal_with_plan("console review", TWO_NOTIFIES)
        page.evaluate(
            f"document.querySelector('#goal').value = {json.dumps(goal)};"
            "document.querySelector('#reasoner').value = 'mono';"
            "document.querySelector('#submit').click(); true"
        )
        page.wait_for("document.querySelectorAll('#approval-calls .call-card').length === 2", 90)
        assert page.evaluate("document.querySelector('#job-state').textContent") == "awaiting a person"
        page.wait_for("document.querySelector('#jobs li.current .state.awaiting') !== null", 30)
        listed = page.evaluate("document.querySelector('#jobs li.current .job-goal').textContent")
        assert listed.startswith("console review PLAN:"), listed
        assert (
            page.evaluate("document.querySelector('#jobs li.current .state').textContent")
            == "awaiting a person"
        )
        job_id = page.evaluate("state.jobId")

        # Call 1: args of the wrong type are caught in the console, before anything is sent.
        page.evaluate(
            f"{_card(1, '.call-args')}.value = '{{\"to\": 5}}'; {_card(1, '.call-approve')}.click(); true"
        )
        error = page.wait_for(f"{_card(1, '.call-error')}.textContent", 10)
        assert error == "Arguments: to must be string, not 5"
        # Without the console's check the API refuses them, and its message shows next to the call.
        page.evaluate(f"approval.schemas = {{}}; {_card(1, '.call-approve')}.click(); true")
        shown = f"{_card(1, '.call-error')}.textContent"
        refused = page.wait_for(f"{shown}.includes('schema') && {shown}", 30)
        assert refused == (
            "the edited args of call 1 ('notify') do not fit its schema: field 'to': 5 is not of type "
            "'string'; nothing was decided"
        )
        assert page.evaluate(f"{_card(1, '.call-approve')}.disabled") is False
        _shot(page, "console-review-parked.png")

        page.evaluate(
            f'{_card(1, ".call-args")}.value = \'{{"to": "ann"}}\'; {_card(1, ".call-approve")}.click(); true'
        )
        page.wait_for(f"{_card(1, '.call-status')}.textContent === 'approved with edited arguments'", 30)
        assert page.evaluate("document.querySelector('#job-state').textContent") == "awaiting a person"
        # The last decision completes the pause: its panel goes (the job no longer waits on it), and
        # the rounds show what became of each call, the rejection's reason with it.
        reject = f"{_card(2, '.call-reason')}.value = 'not eve'; {_card(2, '.call-reject')}.click(); true"
        page.evaluate(reject)
        page.wait_for("document.querySelector('#job-state').textContent === 'completed'", 90)
        assert page.evaluate("document.querySelector('#approval').checkVisibility()") is False
        rows = page.evaluate("Array.from(document.querySelectorAll('.tool')).map((n) => n.innerText)")
        assert any('notify(to="ann")' in r and "notified ann" in r for r in rows), rows
        assert any('notify(to="eve")' in r and "Reason: not eve" in r for r in rows), rows
        events = cluster.store.read_events(job_id, count=1000)
        results = sorted((e.data for e in events if e.type == "tool_result"), key=lambda r: r["index"])
        assert [(r["index"], r["status"]) for r in results] == [(1, "succeeded"), (2, "failed")]
        assert results[0]["output"] == "notified ann" and "not eve" in str(results[1]["output"])
        assert len(runs(cluster, job_id, "notify")) == 1

        # Fork it: round picker and a new goal; the fork opens and runs.
        assert page.evaluate("document.querySelector('#fork').hidden") is False
        page.evaluate("document.querySelector('#fork').click(); true")
        options = page.evaluate(
            "Array.from(document.querySelectorAll('#fork-round option')).map(o => o.value)"
        )
        assert options[-1] == "1", options
        page.evaluate(
            "document.querySelector('#fork-round').value = '1';"
            "document.querySelector('#fork-goal').value = 'Say what was notified.'; true"
        )
        _shot(page, "console-review-fork.png")
        page.evaluate("document.querySelector('#fork-submit').click(); true")
        page.wait_for(f"state.jobId !== {json.dumps(job_id)}", 60)
        fork_id = page.evaluate("state.jobId")
        page.wait_for("document.querySelector('#job-state').textContent === 'completed'", 90)
        # The state may come from the job's status before its stream's job_started gives the goal.
        page.wait_for("document.querySelector('#job-goal').textContent === 'Say what was notified.'", 30)
        spec = cluster.store.spec(fork_id)
        assert spec is not None and spec.goal == "Say what was notified."
        page.wait_for(f"document.querySelector('#jobs li[data-id=\"{fork_id}\"] .job-goal') !== null", 30)
        # The rounds are drawn from the fork's stream, which may come a moment after its list entry.
        origin = page.wait_for("document.querySelector('#rounds .fork-origin')?.textContent", 30)
        kept = "it keeps that job's round 1 (shown there) and goes on from round 2."
        assert origin == f"Forked from job {job_id[:8]}: {kept}"
        _shot(page, "console-review-forked.png")
    finally:
        browser.close()
