"""Durable compaction through real workers: a dual job on tight budgets has its older rounds
summarized by compaction steps on the role queues (the scripted hosts answer the summary
requests), completes with no request over a budget, keeps every original in Redis and never has a
round read by two stored summaries, also when every round pauses for a person's approval; a worker
SIGKILLed in the middle of a summary is taken over and
the job goes on with one summary per span; a person's message sent during a summary reaches that
round's model call."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.reasoner.context.counting import conservative_estimate
from tandem.reasoner.context.summary import SUMMARY_PROMPT
from tandem.tasks.job_events import MemoryCompacted
from tests.event_order import order_problems
from tests.integration.conftest import RESULT_SECONDS, Cluster, _make_cluster
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

ROUNDS = 10
WINDOW = 6000
REPLY_CAP = 1000
NEEDLE = "The launch code is 7-ALPHA."
FINDING = "Finding: " + "the archive lists another shelf of ledgers and letters. " * 36  # ~1,000 tokens


class Hosts:
    """What the scripted hosts do with a summary request: answer at once, or hold the first one
    for ``hold`` seconds (set ``held`` when it comes)."""

    def __init__(self) -> None:
        self.hold = 0.0
        self.held = threading.Event()
        self.tool = "add"
        """The tool the Actor calls each round (``notify`` needs a person's approval)."""
        self.read: dict[str, list[list[int]]] = {"thinker": [], "actor": []}

    def summary(self, role: str, request: RecordedRequest) -> Reply:
        text = str(request["messages"][-1]["content"])
        read = [int(n) for n in re.findall(r"^Round (\d+):", text, re.M)]
        self.read[role].append(read)
        if self.hold and not self.held.is_set():
            self.held.set()
            return Reply(f"Shelves {read} searched.", delay=self.hold)
        return Reply(f"Rounds {read[0]}-{read[-1]}: every shelf searched lists ledgers and letters.")


HOSTS = Hosts()


def _is_summary(request: RecordedRequest) -> bool:
    return str(request["messages"][0].get("content")) == SUMMARY_PROMPT


def _round(request: RecordedRequest) -> int:
    text = "\n".join(str(m.get("content") or "") for m in request["messages"])
    return int(re.findall(r"\[Round (\d+) of", text)[-1])


def thinker(request: RecordedRequest) -> Reply:
    if _is_summary(request):
        return HOSTS.summary("thinker", request)
    if _round(request) == ROUNDS:
        return Reply("<instruction>TASK_DONE: deliver what you found.</instruction>")
    return Reply("<instruction>Search the next shelf and report in full.</instruction>")


def actor(request: RecordedRequest) -> Reply:
    if _is_summary(request):
        return HOSTS.summary("actor", request)
    if _round(request) == ROUNDS:
        return Reply("<action>reporting</action><deliverable>searched every shelf</deliverable>")
    args = '{"a": 1, "b": 2}' if HOSTS.tool == "add" else '{"to": "ops"}'
    call = f'<function_call>{{"name": "{HOSTS.tool}", "args": {args}}}</function_call>'
    return Reply(f"<action>{FINDING}\n{call}</action>")


def sent_tokens(request: RecordedRequest) -> int:
    return sum(conservative_estimate(str(m.get("content") or "")) + 4 for m in request["messages"])


@pytest.fixture
def cluster(redis_base: str) -> Iterator[tuple[Cluster, OpenAIServer, OpenAIServer]]:
    global HOSTS
    HOSTS = Hosts()
    yield from _make_cluster(
        redis_base,
        thinker_script=thinker,
        actor_script=actor,
        TANDEM_THINKER_CONTEXT_TOKENS=str(WINDOW),
        TANDEM_ACTOR_CONTEXT_TOKENS=str(WINDOW),
        TANDEM_THINKER_MAX_TOKENS=str(REPLY_CAP),
        TANDEM_ACTOR_MAX_TOKENS=str(REPLY_CAP),
        TANDEM_LEASE_SECONDS="2",
    )


def _no_round_read_twice(read: list[list[int]]) -> None:
    rounds = [r for s in read for r in s]
    assert len(rounds) == len(set(rounds)), read


def _summaries(cluster: Cluster, job_id: str) -> list[Any]:
    return [m for m in cluster.store.memory(job_id).get_messages() if m.role == "summary"]


def test_a_dual_job_is_summarized_by_compaction_steps_and_completes(
    cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    workers, thinker_host, actor_host = cluster
    workers.start("thinker", "actor", "tools")
    handle = workers.submit(goal=f"Search the archive. {NEEDLE}", max_rounds=ROUNDS)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert result.rounds == ROUNDS

    limit = WINDOW - REPLY_CAP
    for host, role in ((thinker_host, "thinker"), (actor_host, "actor")):
        jobs = [r for r in host.requests if not _is_summary(r)]
        assert len(jobs) == ROUNDS
        assert max(sent_tokens(r) for r in host.requests) <= limit
        assert all(NEEDLE in str(r["messages"][1]["content"]) for r in jobs)  # the goal stays
        assert HOSTS.read[role], f"the {role} was never summarized"
        _no_round_read_twice(HOSTS.read[role])
    assert "[Summary of rounds 1-" in str(
        [r for r in thinker_host.requests if not _is_summary(r)][-1]["messages"][1]
    )

    memory = workers.store.memory(handle.id).get_messages()
    assert sum(FINDING in m.content for m in memory if m.role == "actor") == ROUNDS - 1  # every original
    entries = _summaries(workers, handle.id)
    assert {e.summary.role for e in entries} == {"thinker", "actor"}
    assert all(e.summary.how == "summarized" for e in entries)

    events = list(handle.events(timeout=5))
    assert order_problems(events) == []
    compactions = [e for e in events if isinstance(e, MemoryCompacted) and e.how == "summarized"]
    assert {c.role for c in compactions} == {"thinker", "actor"}
    assert all(c.tokens_after < c.tokens_before and c.summary_of_rounds[0] == 0 for c in compactions)
    assert result.usage.calls == 2 * ROUNDS + len(entries)  # the summaries' calls are the job's


def test_a_worker_killed_mid_summary_is_taken_over_and_one_summary_is_stored(
    cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    workers, _, actor_host = cluster
    HOSTS.hold = 120.0  # the first summary request is answered long after its worker is gone
    group = workers.start("thinker", "actor", "tools")
    handle = workers.submit(goal=f"Search the archive. {NEEDLE}", max_rounds=ROUNDS)
    assert HOSTS.held.wait(RESULT_SECONDS / 2), "no summary was asked for"
    role = next(r for r in ("thinker", "actor") if HOSTS.read[r])
    workers.kill(group, role)
    workers.start(role, name="after-kill")
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    asked = HOSTS.read[role]
    assert len(asked) >= 2 and asked[0] == asked[1]  # the step ran again for the same rounds
    _no_round_read_twice(asked[1:])
    spans = [(e.summary.role, e.summary.since, e.summary.last) for e in _summaries(workers, handle.id)]
    assert len(spans) == len(set(spans))  # one stored summary per span
    _ = actor_host


def test_a_message_sent_during_a_summary_reaches_that_rounds_call(
    cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    workers, thinker_host, _ = cluster
    HOSTS.hold = 3.0
    workers.start("thinker", "actor", "tools")
    handle = workers.submit(goal=f"Search the archive. {NEEDLE}", max_rounds=ROUNDS)
    assert HOSTS.held.wait(RESULT_SECONDS / 2), "no summary was asked for"
    message_id = handle.message("Also count the ledgers.")
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    (said,) = [m for m in workers.store.memory(handle.id).get_messages() if m.message_id == message_id]
    first = next(e for e in handle.events(timeout=5) if isinstance(e, MemoryCompacted))
    # the round whose leading (Thinker) call had not started: the one compacted for, when it was
    # the Thinker's view; the next one, when the Thinker had replied and the Actor's was
    assert said.round == first.round + (first.role == "actor")
    jobs = [r for r in thinker_host.requests if not _is_summary(r)]
    read_in = [_round(r) - 1 for r in jobs if "Also count the ledgers." in str(r["messages"])]
    assert read_in and read_in[0] == said.round and read_in == list(range(said.round, ROUNDS))
    summaries = [r for r in thinker_host.requests if _is_summary(r)]
    assert not [r for r in summaries if "Also count the ledgers." in str(r["messages"])]


def test_a_job_that_pauses_for_approval_every_round_is_compacted_and_completes(
    cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    workers, _, _ = cluster
    HOSTS.tool = "notify"
    workers.start("thinker", "actor", "tools")
    handle = workers.submit(goal=f"Search the archive. {NEEDLE}", max_rounds=ROUNDS)
    approved = 0
    deadline = time.monotonic() + RESULT_SECONDS
    while workers.store.result(handle.id) is None and time.monotonic() < deadline:
        if handle.status().state == "awaiting_approval":
            handle.approve()
            approved += 1
        time.sleep(0.1)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert approved == ROUNDS - 1
    assert [c["name"] for c in workers.tool_calls()].count("notify") == ROUNDS - 1  # each ran once
    for role in ("thinker", "actor"):
        assert HOSTS.read[role], f"the {role} was never summarized"
        _no_round_read_twice(HOSTS.read[role])


def test_the_console_shows_each_compaction(cluster: tuple[Cluster, OpenAIServer, OpenAIServer]) -> None:
    from tests.integration.cdp import Browser, chromium_path
    from tests.integration.test_api import ApiProcess

    found = chromium_path()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: CI needs it (.ci/run installs Debian's chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    workers, _, _ = cluster
    workers.start("thinker", "actor", "tools")
    handle = workers.submit(goal=f"Search the archive. {NEEDLE}", max_rounds=ROUNDS)
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    first = next(e for e in handle.events(timeout=5) if isinstance(e, MemoryCompacted))
    server = ApiProcess({**workers.env, "TANDEM_API_TOKENS": ""})
    browser = Browser(f"{server.url}/?job={handle.id}", found)
    try:
        page = browser.page()
        lines = page.wait_for(
            "Array.from(document.querySelectorAll('#rounds .compaction'))"
            ".map(n => n.textContent).join('\\n')",
            60,
        )
        a, b = first.summary_of_rounds
        tokens = f"{first.tokens_before:,} → {first.tokens_after:,} tokens"
        expected = f"memory compacted: rounds {a + 1}–{b + 1}, {tokens}"
        assert lines.splitlines()[0].startswith(expected), lines
        assert f"summarized for the {first.role}" in lines
        page.close()
    finally:
        browser.close()
        server.stop()
