"""``TANDEM_REDIS_WAIT_REPLICAS=1`` through a failover (a primary, a replica and three Sentinels,
``tests.integration.redis_sentinel``; the broker, the result backend and the job state on them).

Jobs whose every round makes an ``at_most_once`` call (``charge_card``) run while the primary is
SIGKILLed: once the replica is promoted no worker has exited, no call ran twice, and every job
completes or ends with a reason. Until a replica is back, the promoted master has none: an
``at_most_once`` call is put off (its tool not run, the reason in the job's record); once the old
primary comes back as a replica, the call runs, once. The tools record their calls in a database
of the shared plain Redis, which the failover does not touch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from redis import Redis

from tandem.tasks.errors import JobLostError
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _cluster_on, _exclusive_db
from tests.integration.plan_model import goal_with_plan
from tests.integration.redis_sentinel import OwnSentinelGroup
from tests.integration.test_durability import runs, wait_for
from tests.integration.test_redis_sentinel import FAST, own_group

pytestmark = pytest.mark.integration

CHARGES = [
    [{"name": "charge_card", "args": {"amount": 5, "seconds": 1}}],
    [{"name": "charge_card", "args": {"amount": 7, "seconds": 0}}],
]
"""Two rounds, each with one ``at_most_once`` call; the first holds its tools thread a second."""


@pytest.fixture
def waiting_cluster(redis_base: str) -> Iterator[tuple[Cluster, OwnSentinelGroup]]:
    group = own_group()
    try:
        with _exclusive_db() as db:
            plain = f"{redis_base}/{db}"
            Redis.from_url(plain).flushdb()
            gen = _cluster_on(
                group.url(0),
                TEST_CALLS_REDIS_URL=plain,
                TANDEM_TOOLKIT="tests.integration.tools:durable_toolkit",
                TANDEM_REDIS_WAIT_REPLICAS="1",
                TANDEM_REDIS_WAIT_TIMEOUT_MS="500",
                **FAST,
            )
            cluster, _, _ = next(gen)
            try:
                yield cluster, group
            finally:
                next(gen, None)  # stops the workers, checks every key's TTL on the master of the moment
                Redis.from_url(plain).flushdb()
    finally:
        group.stop()


def test_no_at_most_once_call_runs_twice_through_a_failover(
    waiting_cluster: tuple[Cluster, OwnSentinelGroup],
) -> None:
    cluster, group = waiting_cluster
    cluster.start("thinker", "actor", "tools")
    first = cluster.submit(goal=goal_with_plan("before the failover", CHARGES), max_rounds=5)
    assert first.result(timeout=RESULT_SECONDS).status == "completed"
    assert len(runs(cluster, first.id, "charge_card")) == 2

    flight = [cluster.submit(goal=goal_with_plan(f"in flight {i}", CHARGES), max_rounds=6) for i in range(4)]
    wait_for(
        lambda: any(c["job"] in {h.id for h in flight} for c in cluster.tool_calls()),
        EVENT_SECONDS,
        "a charge",
    )
    group.kill(group.primary_port)
    wait_for(lambda: group.agreed_master() == group.replica_port, EVENT_SECONDS, "the promotion")
    assert cluster.exited() == [], "a worker exited during the failover"

    # The new master has no replica: an at_most_once call is put off, its tool not run.
    alone = cluster.submit(goal=goal_with_plan("no replica", CHARGES), max_rounds=5)
    new_master = group.node(group.replica_port)
    state = cluster.settings.prefix + ":{" + alone.id + "}:state"
    wait_for(
        lambda: b"the tool did not run" in (new_master.hget(state, "last_error") or b""),
        EVENT_SECONDS,
        "the call to be put off",
    )
    assert runs(cluster, alone.id, "charge_card") == []

    group.restart(group.primary_port)  # back as a replica of the new master
    wait_for(lambda: new_master.info("replication")["connected_slaves"] == 1, EVENT_SECONDS, "a replica")

    ended: dict[str, str] = {}
    for handle in [*flight, alone]:
        try:
            result = handle.result(timeout=RESULT_SECONDS)
        except JobLostError as lost:  # its record was lost with the primary: said so, with why
            ended[handle.id] = f"lost: {lost}"
            continue
        assert result.status == "completed" or result.error, result
        ended[handle.id] = result.status
    assert ended[alone.id] == "completed" and len(runs(cluster, alone.id, "charge_card")) == 2
    charges = Counter(
        (c["job"], c["round"], c["index"]) for c in cluster.tool_calls() if c["name"] == "charge_card"
    )
    assert [k for k, n in charges.items() if n > 1] == [], "an at_most_once call ran twice"
    assert cluster.exited() == [], "a worker exited after the failover"
