"""A Redis Cluster master SIGKILLed mid-run, its replica promoted (three masters with one replica
each, ``cluster-node-timeout`` 2000 ms, ``tests.integration.redis_cluster``), with
``TANDEM_REDIS_WAIT_REPLICAS=1``.

The job state is on the cluster (``redis+cluster://``); the broker and Celery's result backend on a
database of the shared plain Redis, where the tools also record their calls (a side channel the
failover does not touch). Every job's id is chosen so that its keys hash to one master's slots;
that master dies while four jobs make ``at_most_once`` calls (``charge_card``) and a fifth waits
for approval. Once the replica is promoted no worker has exited; a job started on the promoted
master alone has its ``at_most_once`` call put off (no replica to acknowledge its mark) until the
killed node is back as its replica; then every job completes or is reported lost with a reason,
and no ``at_most_once`` call ran twice.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from redis import Redis
from redis.crc import key_slot

from tandem.broker_config.job_redis import job_store_client
from tandem.client.handle import JobHandle
from tandem.client.submission import submit
from tandem.tasks.errors import JobLostError
from tandem.tasks.state.store import JobStore
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _cluster_on, _exclusive_db
from tests.integration.plan_model import goal_with_plan
from tests.integration.redis_cluster import ClusterUnsupported, OwnRedisCluster
from tests.integration.test_durability import runs, wait_for
from tests.integration.test_redis_cluster import FAST, untimed_keys

pytestmark = pytest.mark.integration

NODE_TIMEOUT_MS = 2000
CHARGES = [
    [{"name": "charge_card", "args": {"amount": 5, "seconds": 1}}],
    [{"name": "charge_card", "args": {"amount": 7, "seconds": 0}}],
]
"""Two rounds, each with one ``at_most_once`` call; the first holds its tools thread a second."""
APPROVAL = [[{"name": "add", "args": {"a": 1, "b": 2}}, {"name": "notify", "args": {"to": "ops"}}]]
"""One round: ``add`` runs, ``notify`` waits for a person's approval."""


def replicated_cluster() -> OwnRedisCluster:
    """Three masters with a replica each, started; a skip (a failure in CI) when impossible."""
    try:
        return OwnRedisCluster(masters=3, node_timeout_ms=NODE_TIMEOUT_MS, replicas=1).start()
    except ClusterUnsupported as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Redis Cluster can be started: {exc}")
        pytest.skip(f"no Redis Cluster can be started: {exc}")


@pytest.fixture
def on_replicated(redis_base: str) -> Iterator[tuple[Cluster, OwnRedisCluster]]:
    """Workers with the job state on a replicated cluster and ``TANDEM_REDIS_WAIT_REPLICAS=1``."""
    server = replicated_cluster()
    try:
        with _exclusive_db() as db:
            plain = f"{redis_base}/{db}"
            Redis.from_url(plain).flushdb()
            gen = _cluster_on(
                plain,
                TANDEM_REDIS_URL=server.url,
                TEST_CALLS_REDIS_URL=plain,
                TANDEM_TOOLKIT="tests.integration.tools:durable_toolkit",
                TANDEM_REDIS_WAIT_REPLICAS="1",
                TANDEM_REDIS_WAIT_TIMEOUT_MS="500",
                **FAST,
            )
            cluster, _, _ = next(gen)
            cluster.store = JobStore(job_store_client(cluster.settings), cluster.settings.prefix)
            try:
                yield cluster, server
            finally:
                next(gen, None)  # stops the workers (fails if one exited by itself)
            untimed = untimed_keys(server, cluster.settings.prefix)
            assert not untimed, f"tandem keys without a TTL on the cluster: {untimed}"
    finally:
        server.stop()


def ids_on(slots: set[int]) -> Iterator[str]:
    """Fresh job ids whose keys (hash tag ``{<id>}``) fall in ``slots``."""
    while True:
        job_id = str(uuid.uuid4())
        if key_slot(job_id.encode()) in slots:
            yield job_id


def test_a_killed_master_s_jobs_complete_and_no_at_most_once_call_runs_twice(
    on_replicated: tuple[Cluster, OwnRedisCluster],
) -> None:
    cluster, server = on_replicated
    cluster.start("thinker", "actor", "tools")
    doomed = server.master_of("{anything}")
    heir = server.replica_of(doomed)
    ids = ids_on(server.slot_range(doomed))

    def send(goal: str, plan: list, **spec: object) -> JobHandle:
        goal = goal_with_plan(goal, plan)
        return submit({"goal": goal, **spec}, app=cluster.app, store=cluster.store, job_id=next(ids))

    first = send("before the failover", CHARGES, max_rounds=5)
    assert first.result(timeout=RESULT_SECONDS).status == "completed"
    assert len(runs(cluster, first.id, "charge_card")) == 2

    parked = send("approval", APPROVAL, reasoner="mono", max_rounds=4)
    wait_for(lambda: parked.status().state == "awaiting_approval", EVENT_SECONDS, "the job to park")
    flight = [send(f"in flight {i}", CHARGES, max_rounds=6) for i in range(4)]
    wait_for(
        lambda: any(c["job"] in {h.id for h in flight} for c in cluster.tool_calls()),
        EVENT_SECONDS,
        "a charge",
    )
    server.kill(doomed)
    wait_for(
        lambda: server.roles().get(heir) == "master" and server.state(heir) == "ok",
        EVENT_SECONDS,
        "the cluster to promote the replica",
    )
    assert server.master_of(f"{{{parked.id}}}") == heir
    assert cluster.exited() == [], "a worker exited during the failover"

    # The promoted master has no replica: an at_most_once call is put off, its tool not run.
    alone = send("no replica", CHARGES, max_rounds=5)
    new_master = server.node(heir)
    state = cluster.settings.prefix + ":{" + alone.id + "}:state"
    wait_for(
        lambda: b"the tool did not run" in (new_master.hget(state, "last_error") or b""),
        EVENT_SECONDS,
        "the call to be put off",
    )
    assert runs(cluster, alone.id, "charge_card") == []

    server.restart(doomed)  # back, as the promoted master's replica
    wait_for(lambda: new_master.info("replication")["connected_slaves"] == 1, EVENT_SECONDS, "a replica")

    ended: dict[str, str] = {}
    try:
        parked.approve(timeout=60)
    except JobLostError as lost:
        ended[parked.id] = f"lost: {lost}"
    for handle in [*flight, alone, parked]:
        if handle.id in ended:
            continue
        try:
            result = handle.result(timeout=RESULT_SECONDS)
        except JobLostError as lost:  # its record was lost with the master: said so, with why
            ended[handle.id] = f"lost: {lost}"
            continue
        assert result.status == "completed" or result.error, result
        ended[handle.id] = result.status
    assert ended[alone.id] == "completed" and len(runs(cluster, alone.id, "charge_card")) == 2
    assert ended[parked.id] == "completed", ended
    assert len(runs(cluster, parked.id, "notify")) == 1
    charges = Counter(
        (c["job"], c["round"], c["index"]) for c in cluster.tool_calls() if c["name"] == "charge_card"
    )
    assert [k for k, n in charges.items() if n > 1] == [], "an at_most_once call ran twice"
    assert cluster.exited() == [], "a worker exited after the failover"


def serves_everywhere(server: OwnRedisCluster, key: str, port: int) -> bool:
    """Whether every live node's ``CLUSTER SLOTS`` names the node on ``port`` as ``key``'s master."""
    slot = key_slot(key.encode())
    for live in server.live():
        try:
            ranges = server.node(live).execute_command("CLUSTER SLOTS")
        except Exception:
            return False
        owners = [int(master[1]) for start, end, master, *_ in ranges if int(start) <= slot <= int(end)]
        if owners != [port]:
            return False
    return True


def test_a_waited_write_finds_the_promoted_replica_after_one_connection_error(redis_base: str) -> None:
    """``run_waited`` sends its pipeline to the slot's primary on a plain connection, outside the
    cluster client's retries: after the primary's death the first attempt fails, and the client
    has learnt the new layout, so the next one reaches the promoted replica (and its ``WAIT`` is
    answered, with no replica left: 0)."""
    from redis.commands.core import Script
    from redis.exceptions import ConnectionError as RedisConnectionError

    from tandem.broker_config import Settings
    from tandem.tasks.state.replicas import ReplicaWait, run_waited

    server = replicated_cluster()
    try:
        client = job_store_client(Settings.from_env({"TANDEM_REDIS_URL": server.url}))
        source = "redis.call('SET', KEYS[1], ARGV[1], 'EX', 60) return 1"
        script = Script(client, source)
        wait = ReplicaWait(replicas=1, timeout_ms=200)  # after the death: no replica to wait for
        key = "{waited}:mark"
        live = ReplicaWait(replicas=1, timeout_ms=int(EVENT_SECONDS * 1000))  # answered once acked
        _, first = run_waited(client, script, source, [key], ["one"], live, what="t", job_id="j")
        assert first is not None and first.acked == 1
        doomed = server.master_of(key)
        heir = server.replica_of(doomed)
        server.kill(doomed)
        wait_for(
            lambda: server.roles().get(heir) == "master" and server.state(heir) == "ok",
            EVENT_SECONDS,
            "the promotion",
        )
        # Every live node tells the new layout (on a loaded machine the heir knew it was master
        # while another node still named the dead one, and the client read that node's layout)
        wait_for(lambda: serves_everywhere(server, key, heir), EVENT_SECONDS, "the layout's spread")
        with pytest.raises(RedisConnectionError):
            run_waited(client, script, source, [key], ["two"], wait, what="t", job_id="j")
        reply, waited = run_waited(client, script, source, [key], ["two"], wait, what="t", job_id="j")
        assert reply == 1 and waited is not None and waited.acked == 0
        assert server.node(heir).get(key) == b"two"
        client.close()
    finally:
        server.stop()
