"""The console's tree of child jobs, in headless Chromium on real workers (issue 35).

A mono parent's round 0 calls ``fan_out`` (``tests.integration.children_tools``), which starts
three children of at most 2 rounds: one waits for the test's gate, one starts a child of its own
(a grandchild), one has a plan of two tool rounds and is truncated. The page opened on the parent
shows its children as they are spawned, follows them while the parent waits, and moves each
child's state as it ends (``child_ended``), the gated child last, without a reload; a click on a
child opens it with a link back to its parent and its own child; a reload shows the same.
Screenshots go to ``$TANDEM_TEST_ARTIFACTS`` (default ``.artifacts/``): ``console-children-*.png``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.cdp import Browser
from tests.integration.children_tools import GATE
from tests.integration.conftest import Cluster, _make_cluster
from tests.integration.console_page import ConsolePage
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess
from tests.integration.test_console_browser import ARTIFACTS, chromium

pytestmark = pytest.mark.integration
__all__ = ["chromium"]  # the fixture, used by name

SLEEP = {"name": "sleep_tool", "args": {"seconds": 0.2}}
GATED = goal_with_plan("Read chapter one", [[{"name": "wait_for_gate", "args": {}}]])
NESTED = goal_with_plan(
    "Read chapter two and its notes",
    [[{"name": "fan_out", "args": {"goals": [goal_with_plan("Read the notes of chapter two", [[SLEEP]])]}}]],
)
LONG = goal_with_plan("Read chapter three", [[SLEEP], [SLEEP]])  # 3 rounds' plan, 2 allowed
PARENT = goal_with_plan(
    "Write the report on three chapters",
    [[{"name": "fan_out", "args": {"goals": [GATED, NESTED, LONG], "max_rounds": 2}}]],
)
SHOWN = """[state.jobId, document.querySelector('#job-state').dataset.state,
  document.querySelector('#parent-line').hidden ? null : document.querySelector('#parent-link').title,
  Array.from(document.querySelectorAll('#children-list li')).map((li) =>
    [li.dataset.id, li.querySelector('.state').textContent])]"""
"""The job the page shows, its state, its parent's id (when the parent line shows) and each listed
child's id and state as a person reads them."""


@pytest.fixture(scope="module")
def family(redis_base: str) -> Iterator[tuple[Cluster, ApiProcess]]:
    """Workers that load the spawning tools, and ``tandem api`` with no tokens."""
    gen = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.children_tools:toolkit",
        TANDEM_API_TOKENS="",
        TANDEM_STALL_SECONDS="1",
        TANDEM_LEASE_SECONDS="2",
    )
    cluster, _, _ = next(gen)
    cluster.start("thinker", "actor", "tools", concurrency={"tools": 4})
    server = ApiProcess(cluster.env)
    try:
        yield cluster, server
    finally:
        server.stop()
        next(gen, None)


def shot(page: ConsolePage, name: str) -> None:
    assert page.shot(name).read_bytes().startswith(b"\x89PNG")


def ended(cluster: Cluster, job_id: str) -> str | None:
    result = cluster.store.result(job_id)
    return None if result is None else result.status


def shows(page: ConsolePage, expected: list[object], what: str) -> None:
    page.wait(
        f"JSON.stringify({SHOWN}) === {json.dumps(json.dumps(expected, separators=(',', ':')))}", 120, what
    )


def test_the_console_shows_a_parents_children_live_opens_a_child_and_keeps_the_tree_on_reload(
    chromium: str, family: tuple[Cluster, ApiProcess]
) -> None:
    cluster, server = family
    cluster.calls.delete(GATE)
    made = httpx.post(f"{server.url}/v1/jobs", json={"goal": PARENT, "reasoner": "mono", "max_rounds": 4})
    assert made.status_code == 202, made.text
    parent = made.json()["id"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser = Browser("about:blank", chromium)
    page = ConsolePage.first_tab(browser, ARTIFACTS)
    try:
        page.goto(f"{server.url}/?job={parent}")  # the probe is installed before the page loads
        page.wait("document.querySelectorAll('#children-list li').length === 3", 120, "three children")
        listed = httpx.get(f"{server.url}/v1/jobs/{parent}/children").json()["children"]
        gated, nested, long = (c["job_id"] for c in listed)
        # The two children that need no gate end while the parent waits; the page moves their
        # lines as their ends come (child_ended), the gated child still under way.
        page.wait(
            f"{json.dumps([nested, long])}.every((id) => "
            "['completed', 'truncated'].includes(document.querySelector("
            "`#children-list li[data-id='${id}'] .state`).textContent))",
            120,
            "the ungated children ended",
        )
        assert (ended(cluster, nested), ended(cluster, long), ended(cluster, gated)) == (
            "completed",
            "truncated",
            None,
        )
        # The gated child runs (its tool waits for the gate): its line follows it there too.
        under_way = [[gated, "running"], [nested, "completed"], [long, "truncated"]]
        shows(page, [parent, "waiting_for_children", None, under_way], "the gated child running")
        assert cluster.store.status(gated).state == "running"  # type: ignore[union-attr]
        assert "Cancel" in page.buttons()  # a parent waiting for its children may be cancelled
        shot(page, "console-children-waiting")

        cluster.calls.set(GATE, "1", ex=600)
        tree = [[gated, "completed"], [nested, "completed"], [long, "truncated"]]
        shows(page, [parent, "completed", None, tree], "the parent and all its children ended")
        assert "3 started, 3 ended" in page.text()
        view = page.view()
        assert view["width"] <= view["window"], page.js("P.wide()")
        shot(page, "console-children-parent")

        # A child: a link back to its parent, and its own child.
        page.click_on(f"#children-list li[data-id='{nested}'] .goal")  # its line, not its link
        [grandchild] = cluster.store.result(nested).children  # type: ignore[union-attr]
        seen = [nested, "completed", parent, [[grandchild, "completed"]]]
        shows(page, seen, "the nested child with its parent link and its own child")
        assert f"A child job of {parent[:8]}" in page.text()
        shot(page, "console-children-child")
        page.reload()
        shows(page, seen, "the same child after a reload")

        # Back to the parent by its link; a reload shows the same tree.
        page.click_on("#parent-link")
        shows(page, [parent, "completed", None, tree], "the parent again, by the child's link")
        page.reload()
        shows(page, [parent, "completed", None, tree], "the parent's tree after a reload")
    finally:
        cluster.calls.delete(GATE)
        page.close()
        browser.close()
