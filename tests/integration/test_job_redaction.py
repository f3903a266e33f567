"""Redaction per job, on real workers (issue 25, item 3): a job's secrets mask its own records and
log lines, never another job's, and the operator's credentials stay masked in every job.

Jobs run one after the other on the same worker processes, as the report had them: job A's secret
``"sum="`` (a careless tool echoes it) turned job B's tool output ``sum=5`` into ``***5``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet

from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan

pytestmark = pytest.mark.integration

OPERATOR_KEY = "operator-model-key-7731"


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Cluster]:
    gen = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.redaction_tools:toolkit",
        TANDEM_SECRETS_KEY=Fernet.generate_key().decode(),
        TANDEM_THINKER_API_KEY=OPERATOR_KEY,
    )
    cluster, _, _ = next(gen)
    cluster.start("thinker", "actor", "tools")
    yield cluster
    next(gen, None)


def tool_outputs(cluster: Cluster, job_id: str) -> list[str]:
    """The stored outputs of the job's tool calls."""
    raw = cluster.redis.hgetall(f"{cluster.settings.prefix}:{{{job_id}}}:tools")
    return [json.loads(v)["output"] for v in raw.values()]


def job_bytes(cluster: Cluster, job_id: str) -> bytes:
    """Every value of the job's keys (record, memory, events, results)."""
    parts: list[bytes] = []
    for key in cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:{{{job_id}}}:*"):
        kind = cluster.redis.type(key).decode()
        if kind == "string":
            parts.append(cluster.redis.get(key) or b"")
        elif kind == "hash":
            parts += list(cluster.redis.hgetall(key).values())
        elif kind == "list":
            parts += cluster.redis.lrange(key, 0, -1)
        elif kind == "stream":
            parts += [v for _id, fields in cluster.redis.xrange(key) for v in fields.values()]
    return b"\n".join(parts)


def logs(cluster: Cluster) -> str:
    return "".join(p.read_text(errors="replace") for g in cluster.groups for p in g.log_dir.glob("*.log"))


def test_a_jobs_secret_masks_its_own_records_and_never_another_jobs(cluster: Cluster) -> None:
    a = cluster.submit(
        goal=goal_with_plan("job a", [[{"name": "leak", "args": {}}]]), secrets={"tok": "sum="}
    )
    assert a.result(timeout=RESULT_SECONDS).status == "completed"
    b = cluster.submit(goal=goal_with_plan("job b", [[{"name": "echo", "args": {"text": "sum=5"}}]]))
    assert b.result(timeout=RESULT_SECONDS).status == "completed"

    assert tool_outputs(cluster, a.id) == ["the token is ***"]
    assert b"the token is sum=" not in job_bytes(cluster, a.id)
    assert tool_outputs(cluster, b.id) == ["sum=5"]  # not "***5": A's secret is not B's
    assert b"***5" not in job_bytes(cluster, b.id)
    text = logs(cluster)
    assert "leak: the token is ***" in text and "the token is sum=" not in text
    assert "echo: sum=5" in text


def test_the_operators_key_stays_masked_in_every_jobs_records(cluster: Cluster) -> None:
    with_secrets = [
        cluster.submit(
            goal=goal_with_plan(f"job {i}", [[{"name": "leak", "args": {}}]]),
            secrets={"tok": f"job-{i}-token", **{f"s{k}": f"job-{i}-secret-{k:02d}" for k in range(15)}},
        )
        for i in range(4)
    ]
    for handle in with_secrets:
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    c = cluster.submit(
        goal=goal_with_plan("job c", [[{"name": "echo", "args": {"text": f"key {OPERATOR_KEY}"}}]])
    )
    assert c.result(timeout=RESULT_SECONDS).status == "completed"
    assert tool_outputs(cluster, c.id) == ["key ***"]
    assert [tool_outputs(cluster, h.id) for h in with_secrets] == [["the token is ***"]] * 4
    assert f"echo: key {OPERATOR_KEY}" not in logs(cluster)


def _wait_for_state(handle, state: str, timeout: float = EVENT_SECONDS) -> None:  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout
    while handle.status().state != state:
        assert time.monotonic() < deadline, f"the job never reached {state}: {handle.status()}"
        time.sleep(0.1)


def test_a_decision_and_a_fork_mask_the_jobs_own_secrets(cluster: Cluster) -> None:
    """``tandem.decide`` and ``tandem.fork`` write the job's records in its secret scope: a person who
    pastes the job's token into edited args or a fork's goal sees it masked in the events."""
    token = "decided-token-5511"
    plan = [[{"name": "echo", "args": {"text": "draft"}}]]
    handle = cluster.submit(
        goal=goal_with_plan("approve an echo", plan), secrets={"tok": token}, approve_tools=["echo"]
    )
    _wait_for_state(handle, "awaiting_approval")
    decisions = handle.decide([{"index": 1, "approve": True, "args": {"text": f"send {token}"}}])
    assert [d.approve for d in decisions] == [True]
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    decided = [e for e in cluster.store.read_events(handle.id, count=1000) if e.type == "approval_decided"]
    assert [d.data["decisions"][0]["args"] for d in decided] == [{"text": "send ***"}]
    assert tool_outputs(cluster, handle.id) == ["send ***"]

    fork = handle.fork(1, goal=goal_with_plan(f"again with {token}", plan))
    started = [e for e in cluster.store.read_events(fork.id, count=10) if e.type == "job_started"]
    assert len(started) == 1 and token not in json.dumps(started[0].data), started
    events = cluster.redis.xrange(f"{cluster.settings.prefix}:{{{handle.id}}}:events")
    assert token.encode() not in b"".join(v for _id, fields in events for v in fields.values())


def test_an_answer_masks_the_jobs_own_secrets(cluster: Cluster) -> None:
    """``tandem.answer`` writes in the job's secret scope: a person who pastes the job's token into
    an answer sees it masked in the ``question_answered`` event."""
    import time

    token = "answered-token-8812"
    plan = [[{"name": "ask_person", "args": {"question": "Which token?"}}]]
    handle = cluster.submit(
        goal=goal_with_plan("ask for a token", plan), secrets={"tok": token}, ask_person=True, reasoner="mono"
    )
    deadline = time.monotonic() + 60
    while handle.status().pause_kind != "question":
        assert time.monotonic() < deadline, handle.status()
        time.sleep(0.1)
    handle.answer(f"it is {token}")
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    answered = [
        e.data for e in cluster.store.read_events(handle.id, count=1000) if e.type == "question_answered"
    ]
    assert [a["answer"] for a in answered] == ["it is ***"]
    events = cluster.redis.xrange(f"{cluster.settings.prefix}:{{{handle.id}}}:events")
    assert token.encode() not in b"".join(v for _id, fields in events for v in fields.values())
