"""Helpers of ``test_breaking_console``: the tokens and workers' settings, jobs submitted and
answered through a real ``tandem api`` and the ``tandem`` CLI, the intake queue held so a job stays
queued while a page shows it, and what the console offers for the job it shows, read as a person
reads it (the job's panel, its state badge, its buttons and boxes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from tests.integration.conftest import Cluster
from tests.integration.console_page import ConsolePage
from tests.integration.test_api import ApiProcess

FULL = "console-team-a-full-0123456789abcdef"
READ = "console-team-a-read-0123456789abcdef"
TEAM_B = "console-team-b-full-0123456789abcdef"
FOUR = ["submit", "read", "control", "approve"]
TOKENS = {
    FULL: {"tenant": "team-a", "scopes": FOUR},
    READ: {"tenant": "team-a", "scopes": ["read"]},
    TEAM_B: {"tenant": "team-b", "scopes": FOUR},
}
ENV = {
    "TANDEM_TOOLKIT": "tests.integration.breaking_console_tools:toolkit",
    "TANDEM_API_TOKENS": json.dumps(TOKENS),
    "TANDEM_TOOL_TIMEOUT": "400",  # above the gate's longest wait
    "TANDEM_THINKER_STREAM": "true",
    "TANDEM_ACTOR_STREAM": "true",
}
STATES = (
    "queued",
    "running",
    "waiting",
    "awaiting a person",
    "completed",
    "failed",
    "cancelled",
    "truncated",
)
"""The state badges a person reads on the job (``awaiting_approval`` reads "awaiting a person")."""
CHROME = ("Sign out", "Start job", "Use")
"""Buttons of the page itself (the header and the New job form), not of the job shown."""
BOXES = {"message": "Message to the job", "follow-up": "Follow-up goal", "answer": "Your answer"}
"""The job's text boxes, by the label or placeholder a person reads."""


@dataclass
class Console:
    """The module's world: a cluster, ``tandem api`` and its client (``FULL``'s)."""

    cluster: Cluster
    api: ApiProcess
    http: httpx.Client

    def submit(self, goal: str, **spec: Any) -> str:
        """A job of team-a submitted over HTTP; its id."""
        response = self.http.post("/v1/jobs", json={"goal": goal, **spec})
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        """``GET /v1/jobs/{id}`` as ``FULL`` sees it."""
        response = self.http.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def state(self, job_id: str) -> str:
        return str(self.job(job_id)["status"]["state"])

    def wait_state(self, job_id: str, *states: str, timeout: float = 180) -> dict[str, Any]:
        """Wait until the API reports one of ``states``; the job's answer."""
        return wait_for(
            lambda: self.job(job_id) if self.state(job_id) in states else None,
            timeout,
            f"{job_id} in {states}",
        )

    def wait_pause(self, job_id: str, kind: str, timeout: float = 180) -> str:
        """Wait until the job waits on a pause of ``kind`` (``approval`` or ``question``); its id."""

        def paused() -> str | None:
            status = self.job(job_id)["status"]
            if status["state"] == "awaiting_approval" and status["pause_kind"] == kind:
                return str(status["pause_id"])
            return None

        return str(wait_for(paused, timeout, f"a {kind} pause of {job_id}"))

    def entered(self, job_id: str, gate: str, timeout: float = 180) -> None:
        """Wait until the job's call of the gate ``gate`` is running."""
        wait_for(
            lambda: any(
                c["name"] == "gate_entered" and c["job"] == job_id and c["gate"] == gate
                for c in self.cluster.tool_calls()
            ),
            timeout,
            f"{job_id} at gate {gate}",
        )

    def open_gate(self, gate: str) -> None:
        from tests.integration.breaking_console_tools import gate_key

        self.cluster.calls.rpush(gate_key(gate), "open")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``tandem ARGS`` with the workers' settings (no token: the CLI talks to Redis)."""
        return subprocess.run(
            [sys.executable, "-m", "tandem.workers.cli", *args],
            env={**os.environ, **self.cluster.env},
            capture_output=True,
            text=True,
            timeout=180,
        )

    def intake_drained(self) -> bool:
        """Whether no message waits in the intake queue (any of its priority lists) or is held
        unacknowledged by a worker."""
        redis = self.cluster.redis
        queue = self.cluster.settings.intake_queue
        lists = [k for k in redis.scan_iter(match=f"{queue}*") if redis.type(k) == b"list"]
        return sum(redis.llen(k) for k in lists) == 0 and redis.hlen("unacked") == 0

    @contextmanager
    def intake_held(self) -> Iterator[None]:
        """No worker takes a job from the intake queue meanwhile (a backlog): jobs stay queued."""
        control = self.cluster.app.control
        queue = self.cluster.settings.intake_queue
        replies = control.cancel_consumer(queue, reply=True, timeout=30)
        assert len(replies) == len(self.cluster.groups[0].processes), (
            f"not every worker stopped taking {queue}: {replies}"
        )
        try:
            yield
        finally:
            replies = control.add_consumer(queue, reply=True, timeout=30)
            assert len(replies) == len(self.cluster.groups[0].processes), (
                f"not every worker took {queue} again: {replies}"
            )


def wait_for(what: Callable[[], Any], timeout: float, message: str) -> Any:
    """``what()`` once truthy (polled), else an ``AssertionError`` naming ``message``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {message}")


def sign_in(page: ConsolePage, token: str) -> None:
    """Sign out if signed in, then enter ``token`` as a person does; wait until the page names
    the token's tenant."""
    if "Sign out" in page.buttons():
        page.click("Sign out")
        page.wait_button("Use")
    page.fill("API token", token)
    page.click("Use")
    page.wait_button("Sign out")
    tenant = TOKENS[token]["tenant"]
    page.wait_text(f"tenant {tenant}")


def panel(page: ConsolePage) -> str:
    """The text of the job panel (what the page shows of the job it has open), "" when none."""
    text = page.text()
    return text.split("\nJob\n", 1)[1] if "\nJob\n" in text else ""


def offers(page: ConsolePage) -> dict[str, Any]:
    """What the page offers for the job it shows: its ``state`` badge, its ``buttons`` (sorted),
    its ``boxes`` (message, follow-up, answer), whether a ``question`` or ``calls`` to decide
    are shown."""
    view = page.view()
    shown = view["text"].split("\nJob\n", 1)[1] if "\nJob\n" in view["text"] else ""
    lines = [line.strip() for line in shown.splitlines()]
    return {
        "state": next((line for line in lines if line in STATES), None),
        "buttons": sorted(b for b in view["buttons"] if b not in CHROME),
        "boxes": sorted(
            name for name, label in BOXES.items() if any(label in f["what"] for f in view["fields"])
        ),
        "question": "A question for you" in shown,
        "calls": "for your decision" in shown,
    }


def expect(page: ConsolePage, wanted: dict[str, Any], timeout: float = 120, what: str = "") -> None:
    """Wait until ``offers(page)`` holds every item of ``wanted``; fail showing both."""
    try:
        wait_for(lambda: all(offers(page)[k] == v for k, v in wanted.items()), timeout, what or str(wanted))
    except AssertionError:
        page.shot(f"expected-{int(time.time())}")
        raise AssertionError(f"{what}: the page offers {offers(page)}, the docs say {wanted}") from None


RUNNING = {"buttons": ["Cancel", "Send"], "boxes": ["message"], "question": False, "calls": False}
"""queued, running, waiting: Cancel and the message box (docs/api.md, the console's table)."""
CALLS = {
    "state": "awaiting a person",
    "buttons": ["Approve", "Approve all", "Cancel", "Reject", "Reject all", "Send"],
    "boxes": ["message"],
    "question": False,
    "calls": True,
}
"""awaiting approval on one call: the call to decide (its own Approve and Reject), Approve all,
Reject all, Cancel, the message box."""
QUESTION = {
    "state": "awaiting a person",
    "buttons": ["Answer", "Cancel", "Send"],
    "boxes": ["answer", "message"],
    "question": True,
    "calls": False,
}
"""awaiting approval on a question: the question, its answer box and Answer, Cancel, the message box."""
COMPLETED = {
    "state": "completed",
    "buttons": ["Follow up", "Fork…"],
    "boxes": ["follow-up"],
    "question": False,
    "calls": False,
}
"""completed: the outcome, Fork…, the follow-up box."""


def ended(state: str, fork: bool = True) -> dict[str, Any]:
    """failed, cancelled, truncated after a worker started the job: Resume, Fork… (with a stored
    round), the follow-up box."""
    buttons = ["Follow up", "Fork…", "Resume"] if fork else ["Follow up", "Resume"]
    return {"state": state, "buttons": buttons, "boxes": ["follow-up"], "question": False, "calls": False}


def list_entry_says(page: ConsolePage, job_id: str, state: str) -> bool:
    """Whether the job list (not the job panel) shows ``job_id`` with the badge ``state``."""
    listed = page.text().split("\nJob\n", 1)[0]
    return (
        re.search(re.escape(job_id[:8]) + r"\n[^\n]*\n" + re.escape(state) + r"\n", listed + "\n") is not None
    )


def scope_refusal(page: ConsolePage, scope: str) -> None:
    """Wait until the page says, on one line, that the token lacks ``scope``."""
    page.wait(
        f"V.text.split('\\n').some((l) => /scope/i.test(l) && l.includes(\"'{scope}'\"))",
        60,
        f"a refusal naming the scope {scope!r}",
    )


def harmless(page: ConsolePage, where: str) -> None:
    """Nothing the job carries was built into the page as markup, ran, or widened the page."""
    view = page.view()
    assert view["hostile"] == [] and view["pwned"] is None, (
        f"{where}: hostile markup became elements: {view['hostile']}"
    )
    assert view["violations"] == [], f"{where}: markup tried to run (CSP violations): {view['violations']}"
    assert view["width"] <= view["window"] + 1, (
        f"{where}: the page is {view['width']} px wide in a {view['window']} px window; "
        f"too wide: {page.js('P.wide()')}"
    )
