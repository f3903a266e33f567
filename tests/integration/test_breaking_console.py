"""Trying to break the job console's promises (docs/api.md "The job console", docs/questions.md,
docs/approvals.md, docs/security.md's scopes) in headless Chromium, on real ``celery worker``
processes, a real Redis and a real ``tandem api``.

What must hold, read from the docs: what the page offers for a job follows the state the API
reports, and nothing else (the table: queued/running/waiting offer Cancel and the message box; a
pause on calls offers the calls, Approve all, Reject all, Cancel; a question offers the question,
its answer box and Answer, Cancel; completed offers the outcome, Fork… and the follow-up box;
failed/cancelled/truncated add Resume; Fork… needs a stored round; a job cancelled while queued
says only how it ended). A question or calls to decide show only while the job waits on them,
however they were answered (another tab, the CLI). A token sees and acts for its tenant only and
the page says which scope a refused action needs. Nothing a job carries (goal, question, tool
output, arguments, deliverable) runs as markup or breaks the layout.

"Shows" means what a person sees: laid out with a box, visible after CSS and opacity, text as
rendered (``innerText``), buttons that a click at their centre reaches (``console_page``).
Screenshots of each state go to the ``console-shots`` folder of pytest's temporary directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration import breaking_console_tools as tools
from tests.integration.breaking_console import (
    CALLS,
    COMPLETED,
    ENV,
    FULL,
    QUESTION,
    READ,
    RUNNING,
    TEAM_B,
    Console,
    ended,
    expect,
    harmless,
    list_entry_says,
    offers,
    panel,
    scope_refusal,
    sign_in,
    wait_for,
)
from tests.integration.cdp import Browser, chromium_path
from tests.integration.conftest import _make_cluster
from tests.integration.console_page import ConsolePage
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess

pytestmark = pytest.mark.integration

BOOK = {"name": "book_trip", "args": {}}
NOTIFY = {"name": "notify", "args": {"to": "ops"}}


def gate(name: str) -> dict[str, object]:
    return {"name": "gate", "args": {"name": name}}


@pytest.fixture(scope="module")
def console(redis_base: str) -> Iterator[Console]:
    clusters = _make_cluster(redis_base, **ENV)
    cluster, _, actor = next(clusters)
    actor.set_script(tools.actor_host)
    cluster.start("thinker", "actor", "tools")
    api = ApiProcess(cluster.env)
    http = httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {FULL}"}, timeout=60)
    try:
        yield Console(cluster, api, http)
    finally:
        http.close()
        api.stop()
        next(clusters, None)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("console-shots", numbered=False)
    print(f"screenshots in {folder}")
    return folder


@pytest.fixture(scope="module")
def browser(console: Console) -> Iterator[Browser]:
    binary = chromium_path()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs chromium for the console's browser tests")
        pytest.skip("no chromium installed")
    chromium = Browser(f"{console.api.url}/", binary)
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture
def page(browser: Browser, console: Console, shots: Path) -> Iterator[ConsolePage]:
    """The first tab, signed in with team-a's full token, showing the console."""
    tab = ConsolePage.first_tab(browser, shots)
    tab.goto(f"{console.api.url}/")
    # The page names the stored token's tenant once GET /v1/me answers, after the document loaded.
    tab.wait("V.buttons.includes('Sign out') || V.buttons.includes('Use')", 60, "signed in, or a token asked")
    if "tenant team-a · approve, control, read, submit" not in tab.text():
        sign_in(tab, FULL)
    yield tab
    tab.close()


def open_job(console: Console, page: ConsolePage, job_id: str) -> None:
    page.goto(f"{console.api.url}/?job={job_id}")
    page.wait_text(job_id)


def test_a_job_watched_from_queued_to_completed_offers_what_each_state_allows_after_every_reload(
    console: Console, page: ConsolePage
) -> None:
    goal = goal_with_plan("lifecycle", [[gate("life-1")], [NOTIFY], [gate("life-2")]])
    with console.intake_held():
        page.fill("^textarea \\| Goal$", goal)  # the New job form's goal
        page.click("Start job")  # a dual job, the form's default
        job = page.wait("new URLSearchParams(location.search).get('job')", 60, "the new job opened")
        expect(page, {"state": "queued", **RUNNING}, what="a queued job")
        assert console.state(job) == "queued"
        page.shot("lifecycle-1-queued")
        page.reload()
        expect(page, {"state": "queued", **RUNNING}, what="a queued job, reloaded")
    console.entered(job, "life-1")
    expect(page, {"state": "running", **RUNNING}, what="the job running its first round")
    page.reload()
    expect(page, {"state": "running", **RUNNING}, what="a running job, reloaded")
    page.shot("lifecycle-2-running")

    console.open_gate("life-1")
    pause = console.wait_pause(job, "approval")
    expect(page, CALLS, what="the job awaiting approval of notify")
    page.wait_text(pause)  # the pause it answers is shown (docs/approvals.md)
    page.reload()
    expect(page, CALLS, what="a job awaiting approval, reloaded")
    page.shot("lifecycle-3-approval")

    page.click("Approve all")
    console.entered(job, "life-2")
    expect(page, {"state": "running", **RUNNING}, what="the job running again after the approval")
    page.wait_text("notified ops")  # the call's result stays in its round
    page.reload()
    expect(page, {"state": "running", **RUNNING}, what="the job running again, reloaded")
    assert pause not in panel(page), "the decided pause still shows on a running job"

    console.open_gate("life-2")
    assert console.wait_state(job, "completed")["result"]["deliverable"] == "all planned calls ran"
    expect(page, COMPLETED, what="the completed job")
    page.wait_text("all planned calls ran")
    page.reload()
    expect(page, COMPLETED, what="a completed job, reloaded")
    page.wait_text("all planned calls ran")
    page.shot("lifecycle-4-completed")
    assert page.view()["violations"] == []


def test_a_job_cancelled_while_queued_says_only_how_it_ended(console: Console, page: ConsolePage) -> None:
    with console.intake_held():
        job = console.submit(
            goal_with_plan("cancelled while queued", [[{"name": "add", "args": {"a": 1, "b": 2}}]]),
            reasoner="mono",
            max_rounds=3,
        )
        open_job(console, page, job)
        expect(page, {"state": "queued", **RUNNING}, what="a queued job")
        page.click("Cancel")
        console.wait_state(job, "cancelled")
        nothing = {"state": "cancelled", "buttons": [], "boxes": [], "question": False, "calls": False}
        expect(page, nothing, what="a job cancelled before a worker took it")
        page.shot("queued-cancelled")
    # The intake message is taken and acknowledged now: the job stays cancelled, and so does the page.
    wait_for(console.intake_drained, 120, "the held intake message taken")
    page.reload()
    expect(page, nothing, what="the cancelled job, reloaded after its intake message was taken")
    assert console.state(job) == "cancelled"
    assert "Round" not in panel(page)


def test_a_question_answered_in_another_tab_and_then_from_the_cli_leaves_every_open_page(
    console: Console, page: ConsolePage, browser: Browser, shots: Path
) -> None:
    job = console.submit(goal_with_plan("two trips", [[BOOK], [BOOK]]), reasoner="mono", max_rounds=4)
    first = console.wait_pause(job, "question")
    open_job(console, page, job)
    expect(page, QUESTION, what="the first question")
    page.wait_text(first)
    page.reload()
    expect(page, QUESTION, what="the first question, reloaded")
    page.wait_text(first)
    # The reloaded page replays the job's events (its rounds' panels come from them), and the
    # replayed job_started empties the answer box: type once the replay has reached the call.
    page.wait_text("book_trip()")

    # An answer that does not fit the schema: the page says why, the form stays, nothing changes.
    page.fill("Your answer", '{"town": "Oslo"}')
    page.click("Answer")
    page.wait_text("does not fit its schema", 60)
    expect(page, QUESTION, what="the question after a refused answer")
    assert console.job(job)["status"]["pause_id"] == first

    other = ConsolePage.new_tab(browser, f"{console.api.url}/?job={job}", shots)
    try:
        expect(other, QUESTION, what="the question in a second tab")
        other.fill("Your answer", '{"city": "Oslo"}')
        other.click("Answer")
        second = wait_for(
            lambda: (
                (p := console.job(job)["status"]).get("pause_kind") == "question"
                and p["pause_id"] != first
                and p["pause_id"]
            ),
            180,
            "the second question",
        )
        for tab in (page, other):
            tab.wait_text(second)
            tab.wait_text("booked a trip to Oslo")
            expect(tab, QUESTION, what="the second question, the first one answered in the second tab")
            assert first not in panel(tab), "the answered question's pause still shows"
        page.shot("questions-second")

        answered = console.cli("answer", job, '{"city": "Rome"}', "--owner", "team-a")
        assert answered.returncode == 0, answered.stderr
        console.wait_state(job, "completed")
        for tab in (page, other):
            expect(tab, COMPLETED, what="the job completed after a CLI answer")
            tab.wait_text("booked a trip to Rome")
            assert "A question for you" not in tab.text()
        page.shot("questions-completed")
    finally:
        other.close()


def test_a_job_cancelled_from_the_cli_while_the_page_offers_cancel(
    console: Console, page: ConsolePage
) -> None:
    job = console.submit(
        goal_with_plan("cancel from the cli", [[gate("cli-cancel")]]), reasoner="mono", max_rounds=3
    )
    console.entered(job, "cli-cancel")
    open_job(console, page, job)
    expect(page, {"state": "running", **RUNNING}, what="the running job")
    cancelled = console.cli("cancel", job)
    assert cancelled.returncode == 0, cancelled.stderr
    console.open_gate("cli-cancel")  # the running call ends; the job ends cancelled
    console.wait_state(job, "cancelled")
    expect(page, ended("cancelled"), what="the job cancelled from the CLI")
    page.shot("cli-cancelled")
    assert console.http.post(f"/v1/jobs/{job}/cancel").status_code == 409  # so no Cancel
    page.reload()
    expect(page, ended("cancelled"), what="the job cancelled from the CLI, reloaded")


def test_a_failed_job_shows_why_and_offers_resume_fork_and_a_follow_up(
    console: Console, page: ConsolePage
) -> None:
    job = console.submit(
        goal_with_plan("FAIL_LATE", [[{"name": "add", "args": {"a": 2, "b": 2}}]]),
        reasoner="mono",
        max_rounds=4,
    )
    open_job(console, page, job)
    console.wait_state(job, "failed")
    expect(page, ended("failed"), what="the failed job")
    page.wait_text("FAIL_LATE: this host refuses the second call")
    page.reload()
    expect(page, ended("failed"), what="the failed job, reloaded")
    page.wait_text("FAIL_LATE: this host refuses the second call")
    page.shot("failed")


def test_a_truncated_job_asks_for_a_higher_round_budget_and_resumes(
    console: Console, page: ConsolePage
) -> None:
    job = console.submit("NEVER_DONE truncated", reasoner="mono", max_rounds=2)
    console.wait_state(job, "truncated")
    open_job(console, page, job)
    expect(page, ended("truncated"), what="the truncated job")
    page.replies = ["3"]
    page.click("Resume")
    assert [d["type"] for d in page.dialogs] == ["prompt"], page.dialogs
    assert "round" in page.dialogs[0]["message"].lower()
    wait_for(
        lambda: (console.job(job).get("result") or {}).get("rounds") == 3,
        180,
        "the resumed job's third round",
    )
    assert console.state(job) == "truncated"
    page.wait_text("Round 3 of 3")
    expect(page, ended("truncated"), what="the resumed job, truncated again")
    page.shot("truncated-resumed")


def test_a_job_waiting_on_a_429_host_offers_cancel_and_ends_without_fork(
    console: Console, page: ConsolePage
) -> None:
    job = console.submit("HOST_429 waits", reasoner="mono", max_rounds=2)
    console.wait_state(job, "waiting")
    open_job(console, page, job)
    expect(page, {"state": "waiting", **RUNNING}, what="a job waiting on its host")
    page.reload()
    expect(page, {"state": "waiting", **RUNNING}, what="a waiting job, reloaded")
    page.shot("waiting")
    page.click("Cancel")
    console.wait_state(job, "cancelled")
    # A worker started it (Resume, follow-up), but it stored no round: no Fork….
    expect(page, ended("cancelled", fork=False), what="the waiting job, cancelled")
    page.reload()
    expect(page, ended("cancelled", fork=False), what="the waiting job, cancelled, reloaded")


def test_an_old_job_opened_from_the_list_of_a_fresh_page(console: Console, page: ConsolePage) -> None:
    job = console.submit(
        goal_with_plan("an old job", [[{"name": "add", "args": {"a": 20, "b": 22}}]]), max_rounds=4
    )
    console.wait_state(job, "completed")
    page.goto(f"{console.api.url}/")
    page.wait_text(job[:8])
    page.click_text("an old job PLAN")
    expect(page, COMPLETED, what="an old completed job opened from the list")
    page.wait_text("all planned calls ran")  # the outcome: from the job's status, shown first
    # Its rounds come with its event stream, read after the status: on a slow machine, later.
    wait_for(
        lambda: "add(a=20, b=22)" in panel(page) and "42" in panel(page), 60, "the job's call and result"
    )


def test_switching_between_jobs_shows_only_the_open_jobs_panel_and_events(
    console: Console, page: ConsolePage
) -> None:
    calls = console.submit(
        goal_with_plan("switch calls", [[{"name": "notify", "args": {"to": "alice"}}]]),
        reasoner="mono",
        max_rounds=3,
    )
    question = console.submit(goal_with_plan("switch question", [[BOOK]]), reasoner="mono", max_rounds=3)
    console.wait_pause(calls, "approval")
    console.wait_pause(question, "question")
    open_job(console, page, calls)
    expect(page, CALLS, what="job A's calls")
    for parked in (calls, question):  # "awaiting a person", in the list and on the job
        wait_for(
            lambda job=parked: list_entry_says(page, job, "awaiting a person"),
            60,
            f"{parked} marked in the list",
        )
    assert any("alice" in f["value"] for f in page.fields())
    page.click_text("switch question PLAN")
    page.wait_text(question)
    expect(page, QUESTION, what="job B's question after switching from job A")
    assert not any("alice" in f["value"] for f in page.fields()), "job A's call is still on screen"
    page.click_text("switch calls PLAN")
    page.wait_text(calls)
    expect(page, CALLS, what="job A's calls after switching back")
    assert "A question for you" not in page.text()

    # A live job's later events must not land on the job shown after it.
    live = console.submit(
        goal_with_plan(
            "switch live", [[gate("switch")], [{"name": "echo", "args": {"text": "OUTPUT-OF-LIVE"}}]]
        ),
        reasoner="mono",
        max_rounds=4,
    )
    done = console.submit(
        goal_with_plan("switch done", [[{"name": "add", "args": {"a": 1, "b": 1}}]]),
        reasoner="mono",
        max_rounds=3,
    )
    console.wait_state(done, "completed")
    console.entered(live, "switch")
    open_job(console, page, live)
    expect(page, {"state": "running", **RUNNING}, what="the live job")
    page.click_text("switch done PLAN")
    page.wait_text(done)
    expect(page, COMPLETED, what="the completed job opened while another runs")
    console.open_gate("switch")
    console.wait_state(live, "completed")
    wait_for(lambda: list_entry_says(page, live, "completed"), 120, "the list showing the live job completed")
    shown = panel(page)
    assert "OUTPUT-OF-LIVE" not in shown and live not in shown, (
        f"the live job's events reached another job's panel: {shown}"
    )
    expect(page, COMPLETED, what="the completed job after the other one ended")
    page.shot("switched")


def test_a_read_only_token_watches_and_its_refused_actions_name_the_scope_and_change_nothing(
    console: Console, page: ConsolePage
) -> None:
    calls = console.submit(
        goal_with_plan("read-only calls", [[{"name": "notify", "args": {"to": "ro"}}]]),
        reasoner="mono",
        max_rounds=3,
    )
    question = console.submit(goal_with_plan("read-only question", [[BOOK]]), reasoner="mono", max_rounds=3)
    calls_pause = console.wait_pause(calls, "approval")
    question_pause = console.wait_pause(question, "question")
    try:
        sign_in(page, READ)
        page.wait_text("tenant team-a · read")
        open_job(console, page, calls)
        expect(page, CALLS, what="the calls, as a read-only token sees them")
        page.click("Approve all")
        scope_refusal(page, "approve")
        page.shot("read-only-approve")
        page.click("Cancel")
        scope_refusal(page, "control")
        expect(page, CALLS, what="the calls after refused actions")
        open_job(console, page, question)
        expect(page, QUESTION, what="the question, as a read-only token sees it")
        page.fill("Your answer", '{"city": "Oslo"}')
        page.click("Answer")
        scope_refusal(page, "approve")
        expect(page, QUESTION, what="the question after a refused answer")
    finally:
        sign_in(page, FULL)
    for job, pause in ((calls, calls_pause), (question, question_pause)):
        status = console.job(job)["status"]
        assert (status["state"], status["pause_id"]) == ("awaiting_approval", pause)
    assert not [c for c in console.cluster.tool_calls() if c["job"] == calls and c["name"] == "notify"]


def test_a_tenant_signed_in_after_another_sees_none_of_the_others_job(
    console: Console, page: ConsolePage
) -> None:
    job = console.submit(
        goal_with_plan("team-a private", [[{"name": "echo", "args": {"text": "TEAM-A-PRIVATE-OUTPUT"}}]]),
        reasoner="mono",
        max_rounds=3,
    )
    console.wait_state(job, "completed")
    open_job(console, page, job)
    page.wait_text("TEAM-A-PRIVATE-OUTPUT")
    try:
        sign_in(page, TEAM_B)
        page.wait_text("no jobs yet")  # team-b's own list has loaded
        page.shot("tenant-b-after-a")
        text = page.text()
        assert "TEAM-A-PRIVATE-OUTPUT" not in text and job not in text, (
            f"team-b, signed in after team-a, is shown team-a's job {job}: {panel(page)[:600]!r}"
        )
        assert offers(page)["buttons"] == [], f"team-b is offered actions on team-a's job: {offers(page)}"
    finally:
        sign_in(page, FULL)


@pytest.mark.parametrize("kind", ["approval", "question"])
def test_a_stale_pause_answered_elsewhere_is_refused_and_the_page_stops_offering_it(
    console: Console, page: ConsolePage, browser: Browser, shots: Path, kind: str
) -> None:
    step = NOTIFY if kind == "approval" else BOOK
    job = console.submit(goal_with_plan(f"stale {kind}", [[step]]), reasoner="mono", max_rounds=3)
    console.wait_pause(job, kind)
    stalled = ConsolePage.new_tab(browser, "", shots)
    try:
        stalled.block_event_streams()  # its event stream hangs (a proxy holding it): only GETs answer
        open_job(console, stalled, job)
        expect(
            stalled, CALLS if kind == "approval" else QUESTION, what=f"the {kind} in a tab whose events stall"
        )
        if kind == "approval":
            resolved = console.cli("approve", job, "--owner", "team-a")
        else:
            resolved = console.cli("answer", job, '{"city": "Oslo"}', "--owner", "team-a")
        assert resolved.returncode == 0, resolved.stderr
        console.wait_state(job, "completed")
        if kind == "approval":
            stalled.click("Approve all")
        else:
            stalled.fill("Your answer", '{"city": "Rome"}')
            stalled.click("Answer")
        stalled.wait_text("changes nothing")  # the 409 stale_pause, said
        stalled.shot(f"stale-{kind}")
        ran = [c for c in console.cluster.tool_calls() if c["job"] == job and c["name"] == step["name"]]
        if kind == "approval":
            assert len(ran) == 1, ran  # approved once, by the CLI
        else:  # asked once, booked once, with the CLI's answer
            assert [c.get("city") for c in ran] == ["Oslo"], ran
        # The API said that pause has ended: the page must stop offering it (and Cancel).
        expect(
            stalled,
            {"question": False, "calls": False},
            timeout=60,
            what=f"the stale {kind} withdrawn after the refusal",
        )
        assert "Cancel" not in offers(stalled)["buttons"], (
            f"Cancel offered on an ended job: {offers(stalled)}"
        )
    finally:
        stalled.close()


def test_hostile_text_in_goal_question_output_arguments_and_deliverable_shows_as_text(
    console: Console, page: ConsolePage
) -> None:
    hostile = tools.HOSTILE
    plan = [
        [{"name": "echo", "args": {"text": hostile}}],
        [
            {
                "name": "ask_person",
                "args": {"question": f"Which? {hostile}", "answer_schema": {"type": "string"}},
            }
        ],
        [{"name": "notify", "args": {"to": hostile}}],
    ]
    goal = goal_with_plan(f"HOSTILE_DELIVERABLE {hostile}", plan)
    job = console.submit(goal, reasoner="mono", ask_person=True, max_rounds=5)
    console.wait_pause(job, "question")
    open_job(console, page, job)
    expect(page, QUESTION, what="the hostile question")
    page.wait_text(f"Which? {hostile}")  # the question, as text
    page.wait_text(f"← {hostile}")  # the tool's output, as text
    harmless(page, "a hostile goal, tool output and question")
    page.shot("hostile-question")

    page.fill("Your answer", hostile)  # not JSON: sent as text
    page.click("Answer")
    console.wait_pause(job, "approval")
    expect(page, CALLS, what="the call with hostile arguments")
    assert any(json.dumps(hostile) in f["value"] for f in page.fields()), page.fields()
    harmless(page, "a call to decide with hostile arguments")
    page.click("Approve all")
    assert console.wait_state(job, "completed")["result"]["deliverable"] == hostile
    expect(page, COMPLETED, what="the job with a hostile deliverable")
    page.wait_text(f"Deliverable\n{hostile}")
    page.reload()
    expect(page, COMPLETED, what="the job with a hostile deliverable, reloaded")
    page.wait_text(f"Deliverable\n{hostile}")
    harmless(page, "a hostile deliverable")
    page.shot("hostile-completed")


@pytest.mark.parametrize("where", ["goal", "question", "tool call"])
def test_a_long_unbroken_text_keeps_the_page_within_the_window(
    console: Console, page: ConsolePage, where: str
) -> None:
    # a question holds at most 4,000 characters (toolkit/context.py); goal and tool call get more
    long = "Q" * 4_000 if where == "question" else ("W" if where == "goal" else "X") * 20_000
    if where == "goal":
        job = console.submit(f"long goal {long}", reasoner="mono", max_rounds=2)
    elif where == "question":
        asks = [[{"name": "ask_person", "args": {"question": long, "answer_schema": {"type": "string"}}}]]
        job = console.submit(
            goal_with_plan("long question", asks), reasoner="mono", ask_person=True, max_rounds=3
        )
    else:
        echo = [[{"name": "echo", "args": {"text": long}}]]
        job = console.submit(goal_with_plan("long tool call", echo), reasoner="mono", max_rounds=3)
    if where == "question":
        console.wait_pause(job, "question")
        wanted = QUESTION
    else:
        console.wait_state(job, "completed")
        wanted = COMPLETED
    open_job(console, page, job)
    expect(page, wanted, what=f"a job with a long {where}")
    page.wait_text(long[:4000])
    page.show_overflow()
    page.shot(f"long-{where.replace(' ', '-')}", full=False)
    page.js("window.scrollTo(0, 0)")
    out_of_reach = {name: page.clickable(name) for name in wanted["buttons"]}
    out_of_reach = {n: r for n, r in out_of_reach.items() if not (r and r["hit"] and r["inside"])}
    view = page.view()
    assert not out_of_reach and view["width"] <= view["window"] + 1, (
        f"a long {where}: the page is {view['width']} px wide in a {view['window']} px window "
        f"(too wide: {page.js('P.wide()')}); buttons a person cannot reach without scrolling "
        f"sideways: {out_of_reach}"
    )
    harmless(page, f"a long {where}")
