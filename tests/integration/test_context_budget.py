"""A dual job on tight context budgets through real workers: it completes, the workers report
``memory_compacted``, no request the hosts received is over its role's budget, the goal reaches
every request, and the job's memory in Redis keeps every round. A goal over the budget is refused
at intake, and a reply that cannot fit fails its job, both naming the tokens and the budget."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tandem.reasoner.context.counting import conservative_estimate
from tandem.tasks.job_events import MemoryCompacted
from tests.integration.conftest import RESULT_SECONDS, Cluster, _make_cluster
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration

ROUNDS = 12
WINDOW = 6000
REPLY_CAP = 1000
NEEDLE = "The launch code is 7-ALPHA."
FINDING = "Finding: " + "the archive lists another shelf of ledgers and letters. " * 36  # ~1,000 tokens


def _round(request: RecordedRequest) -> int:
    """The round the request is for (from 1), as its round note says."""
    text = "\n".join(str(m.get("content") or "") for m in request["messages"])
    return int(re.findall(r"\[Round (\d+) of", text)[-1])


def thinker(request: RecordedRequest) -> Reply:
    if _round(request) == ROUNDS:
        return Reply("<instruction>TASK_DONE: deliver what you found.</instruction>")
    return Reply("<instruction>Search the next shelf and report in full.</instruction>")


def actor(request: RecordedRequest) -> Reply:
    if "HUGE_REPLY" in str(request["messages"][1]["content"]):
        return Reply(f"<action>{FINDING * 8}</action>")
    if _round(request) == ROUNDS:
        return Reply("<action>reporting</action><deliverable>searched every shelf</deliverable>")
    call = '<function_call>{"name": "add", "args": {"a": 1, "b": 2}}</function_call>'
    return Reply(f"<action>{FINDING}\n{call}</action>")


def sent_tokens(request: RecordedRequest) -> int:
    """What tandem's budget counts for a request, by the same estimate, over the request as sent."""
    return sum(conservative_estimate(str(m.get("content") or "")) + 4 for m in request["messages"])


@pytest.fixture(scope="module")
def tight_cluster(redis_base: str) -> Iterator[tuple[Cluster, OpenAIServer, OpenAIServer]]:
    clusters = _make_cluster(
        redis_base,
        thinker_script=thinker,
        actor_script=actor,
        TANDEM_THINKER_CONTEXT_TOKENS=str(WINDOW),
        TANDEM_ACTOR_CONTEXT_TOKENS=str(WINDOW),
        TANDEM_THINKER_MAX_TOKENS=str(REPLY_CAP),
        TANDEM_ACTOR_MAX_TOKENS=str(REPLY_CAP),
        TANDEM_COMPACT_AT="0",  # the drop alone (summaries: test_compaction.py)
    )
    cluster, thinker_host, actor_host = next(clusters)
    cluster.start("thinker", "actor", "tools")
    yield cluster, thinker_host, actor_host
    next(clusters, None)  # stops the workers and checks every key's TTL


def test_a_dual_job_on_tight_budgets_completes_and_no_request_passes_them(
    tight_cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    cluster, thinker_host, actor_host = tight_cluster
    thinker_host.clear()
    actor_host.clear()
    handle = cluster.submit(goal=f"Search the archive. {NEEDLE}", max_rounds=ROUNDS)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert result.rounds == ROUNDS

    limit = WINDOW - REPLY_CAP
    for host in (thinker_host, actor_host):
        assert len(host.requests) == ROUNDS
        sizes = [sent_tokens(r) for r in host.requests]
        assert max(sizes) <= limit, sizes
        assert all(NEEDLE in str(r["messages"][1]["content"]) for r in host.requests)
    # untrimmed, the last Thinker request would hold every finding: about twice the budget
    memory = cluster.store.memory(handle.id).get_messages()
    assert sum(FINDING in m.content for m in memory) == ROUNDS - 1  # the stored memory keeps them all
    assert "left out here" in str(thinker_host.requests[-1]["messages"][1]["content"])

    events = list(handle.events(timeout=5))
    compactions = [e for e in events if isinstance(e, MemoryCompacted)]
    assert {c.role for c in compactions} == {"thinker", "actor"}
    for c in compactions:
        assert c.tokens_after <= limit < c.tokens_before
        assert c.how == "dropped" and c.rounds_dropped[0] == 0 and c.rounds_dropped[1] <= c.round - 2
    kinds = [e.type for e in events]
    assert kinds[-1] == "final"


def test_a_goal_over_the_budget_is_refused_at_intake_naming_both_numbers(
    tight_cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    cluster, thinker_host, _ = tight_cluster
    before = thinker_host.request_count
    result = cluster.submit(goal="a long goal " * 2000).result(timeout=RESULT_SECONDS)
    assert result.status == "failed"
    assert re.search(r"the goal and context take [\d,]+ tokens", result.error or ""), result.error
    assert f"context budget of {WINDOW - REPLY_CAP:,} tokens" in (result.error or "")
    assert thinker_host.request_count == before  # nothing was sent


def test_a_reply_that_cannot_fit_fails_the_job_naming_both_numbers(
    tight_cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    cluster, thinker_host, _ = tight_cluster
    thinker_host.clear()
    result = cluster.submit(goal="HUGE_REPLY", max_rounds=3).result(timeout=RESULT_SECONDS)
    assert result.status == "failed"
    assert "ContextLimitError" in (result.error or "") and "round 2" in (result.error or "")
    assert re.search(r"needs [\d,]+ tokens", result.error or "")
    assert f"context budget of {WINDOW - REPLY_CAP:,} tokens" in (result.error or "")
    assert len(thinker_host.requests) == 1  # the Thinker's second request was never sent
