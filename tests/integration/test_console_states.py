"""What the job console shows in each state a job can be in, in headless Chromium (issue 33, item 8).

A panel for a person (a question, calls to approve, Cancel) shows only while the job is in its
state: the question while the job waits on a question (``awaiting_approval`` with ``pause_kind``
``question``), the calls while it waits on a decision, Cancel while ``POST .../cancel`` takes the
job (``queued``, ``running``, ``waiting``, ``awaiting_approval``), none of them once it ended.
"Shows" is what a person sees: laid out, not ``display: none`` or invisible, with a box of its own,
whatever the element's ``hidden`` attribute says.

Each state is reached on real workers and held there without a clock, so the page is looked at
while the API still reports it:

- queued: a cluster with no worker at all (nothing takes the intake message, nothing re-sends it);
- running: the Actor's model host holds the job's call until the test lets it go;
- waiting: the host answers 429 with ``Retry-After: 600`` (over the retry hold: the step parks);
- awaiting approval: the plan calls ``notify`` (``requires_approval``);
- awaiting an answer: the plan calls ``book_trip``, which asks a person which city;
- completed: a dual job that runs one ``add`` and never asks anything;
- truncated: a plan of two rounds with ``max_rounds=1``;
- failed: the host refuses the job's call with 401 (not retried);
- cancelled: Cancel clicked on the queued job, and on the waiting one.

The page has read the job's stream to its last event (``state.lastEventId``) before it is looked
at. Screenshots go to ``$TANDEM_TEST_ARTIFACTS`` (default ``.artifacts/``): ``console-state-*.png``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.cdp import Browser, Page
from tests.integration.conftest import Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess
from tests.integration.test_console_browser import ARTIFACTS, chromium
from tests.integration.test_decide import any_host
from tests.openai_server import RecordedRequest, Reply

pytestmark = pytest.mark.integration
__all__ = ["chromium"]  # the fixture, used by name

PANELS = {
    "question": "#question",
    "approval": "#approval",
    "approve all": "#approve",
    "reject all": "#reject",
    "cancel": "#cancel",
    "message": "#message-form",
    "resume": "#resume",
    "fork": "#fork",
    "follow up": "#follow-up-form",
    "outcome": "#outcome",
}
SHOWN = f"""(() => {{
  const seen = (node) => {{
    const box = node.getBoundingClientRect();
    return node.checkVisibility({{checkOpacity: true, checkVisibilityCSS: true}})
      && box.width > 0 && box.height > 0;
  }};
  const shown = Object.entries({json.dumps(PANELS)})
    .filter(([, selector]) => seen(document.querySelector(selector))).map(([name]) => name);
  const leaks = Array.from(document.querySelectorAll('[hidden]')).filter(seen)
    .map((node) => node.id || node.className || node.tagName);
  return {{shown: shown.sort(), leaks, text: document.querySelector('#job').innerText}};
}})()"""
"""The panels a person sees, the ``hidden`` elements shown anyway (none, ever), and the job's text
as rendered (``innerText`` leaves out what is not shown)."""
READ = "[state.jobId, state.lastEventId, document.querySelector('#job-state').dataset.state]"
"""Which job the page shows, the last of its events the page handled, and the state it shows."""

LIVE_JOB = ["cancel", "message"]
ENDED = ["follow up", "fork", "outcome"]
RESUMABLE = sorted([*ENDED, "resume"])

HOLD, THROTTLE, REVOKED = "hold-the-call", "rate-limited-for-ten-minutes", "key-revoked"


class Host:
    """The Actor's model host: the plan-following model, but a goal naming ``HOLD`` has its first
    call held until the test sets ``released``, ``THROTTLE`` is answered 429 with ``Retry-After: 600``,
    ``REVOKED`` 401 (not retried: the job fails)."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.released = threading.Event()

    def __call__(self, request: RecordedRequest) -> Reply:
        said = json.dumps(request["messages"])
        if HOLD in said and not self.released.is_set():
            self.held.set()
            self.released.wait(300)
        if THROTTLE in said:
            return Reply(status=429, error="rate limited", headers={"Retry-After": "600"})
        if REVOKED in said:
            return Reply(status=401, error="invalid api key")
        return any_host(request)


@pytest.fixture(scope="module")
def busy(redis_base: str) -> Iterator[tuple[Cluster, ApiProcess, Host]]:
    """Thinker, Actor and tools workers (the question tools among them) and ``tandem api``."""
    gen = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.tools:questions_toolkit",
        TANDEM_API_TOKENS="",
        TANDEM_STALL_SECONDS="2",
        TANDEM_LEASE_SECONDS="2",
    )
    cluster, _, actor = next(gen)
    host = Host()
    actor.set_script(host)
    cluster.start("thinker", "actor", "tools")
    server = ApiProcess(cluster.env)
    try:
        yield cluster, server, host
    finally:
        host.released.set()
        server.stop()
        next(gen, None)  # the teardown, with its check of the keys' TTLs


@pytest.fixture(scope="module")
def idle(redis_base: str) -> Iterator[tuple[Cluster, ApiProcess]]:
    """``tandem api`` on a Redis no worker reads: a job stays ``queued``."""
    gen = _make_cluster(redis_base, TANDEM_API_TOKENS="", TANDEM_TOOLKIT="")
    cluster, _, _ = next(gen)
    server = ApiProcess(cluster.env)
    try:
        yield cluster, server
    finally:
        server.stop()
        next(gen, None)


def last_event_id(cluster: Cluster, job_id: str) -> str:
    """The id of the job's newest event ("0" for none)."""
    newest = cluster.redis.xrevrange(cluster.store.key(job_id, "events"), count=1)
    return newest[0][0].decode() if newest else "0"


def shows(page: Page, cluster: Cluster, job_id: str, state: str) -> dict[str, Any]:
    """Wait until the page has read the job's stream to its end and shows ``state``, check that the
    API still reports that state, and return what a person sees (``SHOWN``)."""
    deadline = time.monotonic() + 90
    while (got := page.evaluate(READ)) != [job_id, last := last_event_id(cluster, job_id), state]:
        assert time.monotonic() < deadline, f"the page shows {got}, the job is at {last}: not {state}"
        time.sleep(0.2)
    status = cluster.store.status(job_id)
    assert status is not None and status.state == state, status
    assert last_event_id(cluster, job_id) == last, "the job moved on while the page was looked at"
    seen: dict[str, Any] = page.evaluate(SHOWN)
    assert seen["leaks"] == [], f"hidden elements a person sees: {seen['leaks']}"
    return seen


def open_page(url: str, binary: str) -> tuple[Browser, Page]:
    browser = Browser(url, binary)
    page = browser.page()
    page.wait_for("document.readyState === 'complete' && typeof openJob === 'function'", 30)
    return browser, page


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = page.screenshot()
    assert png.startswith(b"\x89PNG")
    (ARTIFACTS / name).write_bytes(png)


def wait_state(cluster: Cluster, job_id: str, state: str) -> None:
    """Wait until the job's status says ``state``."""
    deadline = time.monotonic() + 90
    while (status := cluster.store.status(job_id)) is None or status.state != state:
        assert time.monotonic() < deadline, f"job {job_id} never reached {state}: {status}"
        time.sleep(0.1)


def test_a_queued_job_shows_cancel_and_cancelled_it_shows_no_panel_for_a_person(
    chromium: str, idle: tuple[Cluster, ApiProcess]
) -> None:
    cluster, server = idle
    job_id = httpx.post(f"{server.url}/v1/jobs", json={"goal": "nobody takes me"}).json()["id"]
    browser, page = open_page(f"{server.url}/?job={job_id}", chromium)
    try:
        seen = shows(page, cluster, job_id, "queued")
        assert seen["shown"] == LIVE_JOB
        assert "A question for you" not in seen["text"] and "Approve all" not in seen["text"]

        page.evaluate("document.querySelector('#cancel').click(); true")
        seen = shows(page, cluster, job_id, "cancelled")
        # Cancelled before it started: no spec was stored, so resume, fork and follow-up (which the
        # API refuses for it) are not offered.
        assert seen["shown"] == ["outcome"]
        assert "cancelled before it started" in seen["text"]
        page.close()
    finally:
        browser.close()


def test_a_running_job_shows_cancel_only(chromium: str, busy: tuple[Cluster, ApiProcess, Host]) -> None:
    cluster, server, host = busy
    job_id = cluster.submit(goal=goal_with_plan(HOLD, []), reasoner="mono", max_rounds=2).id
    browser, page = open_page(f"{server.url}/?job={job_id}", chromium)
    try:
        assert host.held.wait(90), "the job's model call never came"
        seen = shows(page, cluster, job_id, "running")
        assert seen["shown"] == LIVE_JOB
        assert "A question for you" not in seen["text"]
        host.released.set()
        seen = shows(page, cluster, job_id, "completed")
        assert seen["shown"] == ENDED
        page.close()
    finally:
        host.released.set()
        browser.close()


def test_a_waiting_job_shows_cancel_and_cancels(
    chromium: str, busy: tuple[Cluster, ApiProcess, Host]
) -> None:
    cluster, server, _ = busy
    job_id = cluster.submit(goal=goal_with_plan(THROTTLE, []), reasoner="mono", max_rounds=2).id
    browser, page = open_page(f"{server.url}/?job={job_id}", chromium)
    try:
        wait_state(cluster, job_id, "waiting")
        seen = shows(page, cluster, job_id, "waiting")
        assert seen["shown"] == LIVE_JOB
        said = page.evaluate("document.querySelector('#notice').textContent")
        assert said.startswith("waiting: the model host, retrying in"), said

        page.evaluate("document.querySelector('#cancel').click(); true")
        seen = shows(page, cluster, job_id, "cancelled")
        assert seen["shown"] == ["follow up", "outcome", "resume"]  # no round stored: nothing to fork
        page.close()
    finally:
        browser.close()


def test_a_job_awaiting_approval_shows_its_calls_until_they_are_decided(
    chromium: str, busy: tuple[Cluster, ApiProcess, Host]
) -> None:
    cluster, server, _ = busy
    plan = [[{"name": "notify", "args": {"to": "ops"}}]]
    job_id = cluster.submit(goal=goal_with_plan("approve me", plan), reasoner="mono", max_rounds=3).id
    browser, page = open_page(f"{server.url}/", chromium)
    try:
        wait_state(cluster, job_id, "awaiting_approval")
        page.evaluate(f"openJob({json.dumps(job_id)}); true")  # opened once parked: from its status
        seen = shows(page, cluster, job_id, "awaiting_approval")
        assert seen["shown"] == sorted(["approval", "approve all", "reject all", *LIVE_JOB])
        assert "1 call waits for your decision" in seen["text"]
        assert "A question for you" not in seen["text"]

        page.evaluate("document.querySelector('#approve').click(); true")
        seen = shows(page, cluster, job_id, "completed")
        assert seen["shown"] == ENDED
        assert "notified ops" in seen["text"] and "Approve" not in seen["text"]
        page.close()
    finally:
        browser.close()


def test_a_job_awaiting_an_answer_shows_the_question_until_it_is_answered(
    chromium: str, busy: tuple[Cluster, ApiProcess, Host]
) -> None:
    cluster, server, _ = busy
    browser, page = open_page(f"{server.url}/", chromium)
    try:
        plan = [[{"name": "book_trip", "args": {}}]]
        job_id = cluster.submit(goal=goal_with_plan("ask me", plan), reasoner="mono", max_rounds=3).id
        page.evaluate(f"openJob({json.dumps(job_id)}); true")  # followed live, before it asks
        wait_state(cluster, job_id, "awaiting_approval")
        status = cluster.store.status(job_id)
        assert status is not None and status.pause_kind == "question"
        seen = shows(page, cluster, job_id, "awaiting_approval")
        assert seen["shown"] == sorted(["question", *LIVE_JOB])
        assert "Which city should the trip go to?" in seen["text"]
        assert "Approve all" not in seen["text"]
        page.evaluate("document.querySelector('#answer-input').value = '{\"city\": \"Oslo\"}'; true")
        shot(page, "console-state-awaiting-answer.png")

        page.evaluate("document.querySelector('#answer-submit').click(); true")
        seen = shows(page, cluster, job_id, "completed")
        assert seen["shown"] == ENDED
        assert "booked a trip to Oslo" in seen["text"]
        assert "A question for you" not in seen["text"]
        page.close()
    finally:
        browser.close()


def test_a_completed_dual_job_that_never_asked_shows_no_question(
    chromium: str, busy: tuple[Cluster, ApiProcess, Host]
) -> None:
    cluster, server, _ = busy
    plan = [[{"name": "add", "args": {"a": 2, "b": 3}}]]
    handle = cluster.submit(goal=goal_with_plan("add two numbers", plan), max_rounds=4)
    assert handle.result(timeout=90).status == "completed"
    browser, page = open_page(f"{server.url}/?job={handle.id}", chromium)
    try:
        seen = shows(page, cluster, handle.id, "completed")
        assert seen["shown"] == ENDED
        for asking in ("A question for you", "Your answer", "Answer", "Approve all", "Cancel"):
            assert asking not in seen["text"], asking
        assert "all planned calls ran" in seen["text"]
        shot(page, "console-state-completed.png")
        page.close()
    finally:
        browser.close()


def test_a_truncated_job_shows_resume(chromium: str, busy: tuple[Cluster, ApiProcess, Host]) -> None:
    cluster, server, _ = busy
    plan = [[{"name": "add", "args": {"a": 1, "b": 1}}], [{"name": "add", "args": {"a": 2, "b": 2}}]]
    handle = cluster.submit(goal=goal_with_plan("two rounds", plan), reasoner="mono", max_rounds=1)
    assert handle.result(timeout=90).status == "truncated"
    browser, page = open_page(f"{server.url}/?job={handle.id}", chromium)
    try:
        seen = shows(page, cluster, handle.id, "truncated")
        assert seen["shown"] == RESUMABLE
        page.close()
    finally:
        browser.close()


def test_a_failed_job_shows_resume_and_its_error(
    chromium: str, busy: tuple[Cluster, ApiProcess, Host]
) -> None:
    cluster, server, _ = busy
    handle = cluster.submit(goal=goal_with_plan(REVOKED, []), max_rounds=2)
    failed = handle.result(timeout=90)
    assert failed.status == "failed" and "401" in (failed.error or ""), failed
    browser, page = open_page(f"{server.url}/?job={handle.id}", chromium)
    try:
        seen = shows(page, cluster, handle.id, "failed")
        assert seen["shown"] == RESUMABLE  # the Thinker's round 1 is stored: a fork may keep it
        assert page.evaluate("document.querySelector('#outcome-error').textContent") == failed.error
        page.close()
    finally:
        browser.close()
