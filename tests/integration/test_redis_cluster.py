"""The job state on a real Redis Cluster (three masters started here, ``tests.integration.redis_cluster``).

The broker and Celery's result backend stay on the shared plain Redis (a database of the test's
own); ``TANDEM_REDIS_URL`` is ``redis+cluster://`` with the three nodes. Dual jobs with tools
complete (their Celery results delivered through the ``deliver`` mark), a SIGKILLed worker's jobs
complete once, a job refused at intake ends failed and is never sent again, ``tandem api`` lists
and streams jobs, every tandem key on every master has a TTL, and a bad cluster URL is one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tandem.broker_config import Settings
from tandem.broker_config.errors import RedisClusterError
from tandem.broker_config.job_redis import job_store_client
from tandem.tasks.state.store import JobStore
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _cluster_on, _exclusive_db
from tests.integration.plan_model import goal_with_plan
from tests.integration.redis_cluster import ClusterUnsupported, OwnRedisCluster
from tests.integration.test_api import AUTH, TOKEN, ApiProcess, stream
from tests.integration.test_durability import runs, wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
FAST = {"TANDEM_LEASE_SECONDS": "2", "TANDEM_STALL_SECONDS": "3", "TANDEM_TOOL_TIMEOUT": "30"}
PLAN = [[{"name": "add", "args": {"a": 2, "b": 3}}], [{"name": "add", "args": {"a": 1, "b": 1}}]]


def own_cluster() -> OwnRedisCluster:
    """A started cluster, or a skip (a failure in CI) saying what is missing."""
    try:
        return OwnRedisCluster().start()
    except ClusterUnsupported as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Redis Cluster can be started: {exc}")
        pytest.skip(f"no Redis Cluster can be started: {exc}")


@pytest.fixture(scope="module")
def redis_cluster(redis_base: str) -> Iterator[OwnRedisCluster]:
    server = own_cluster()
    try:
        yield server
    finally:
        server.stop()


def untimed_keys(server: OwnRedisCluster, prefix: str) -> list[str]:
    """The ``prefix`` keys without a TTL, on every master (one SCAN per node; a replica holds
    the same keys and answers their TTL with MOVED)."""
    found = []
    for port, role in server.roles().items():
        if role != "master":
            continue
        node = server.node(port)
        found += [f"{port}:{k.decode()}" for k in node.scan_iter(match=f"{prefix}:*") if node.ttl(k) < 0]
    return found


@pytest.fixture
def on_cluster(redis_base: str, redis_cluster: OwnRedisCluster) -> Iterator[Hosts]:
    """Workers with the job store on the cluster, broker and backend on a plain database."""
    redis_cluster.flush()
    with _exclusive_db() as db:
        plain = f"{redis_base}/{db}"
        env = {"TANDEM_REDIS_URL": redis_cluster.url, "TEST_CALLS_REDIS_URL": plain, **FAST}
        gen = _cluster_on(plain, **env)
        cluster, thinker, actor = next(gen)
        cluster.store = JobStore(job_store_client(cluster.settings), cluster.settings.prefix)
        try:
            yield cluster, thinker, actor
        finally:
            next(gen, None)
    untimed = untimed_keys(redis_cluster, cluster.settings.prefix)
    redis_cluster.flush()
    assert not untimed, f"tandem keys without a TTL on the cluster: {untimed}"


def test_dual_jobs_with_tools_and_host_limits_complete_and_their_celery_results_are_delivered(
    on_cluster: Hosts, redis_cluster: OwnRedisCluster
) -> None:
    cluster, _, _ = on_cluster
    # Fleet-wide host limits: the capacity scripts run on the cluster too (one slot per host).
    limits = {
        "TANDEM_ACTOR_MAX_IN_FLIGHT": "3",
        "TANDEM_THINKER_RPM": "6000",
        "TANDEM_THINKER_TPM": "10000000",
    }
    cluster.start("thinker", "actor", "tools", **limits)
    handles = [cluster.submit(goal=goal_with_plan(f"cluster {i}", PLAN), max_rounds=5) for i in range(8)]
    results = [h.result(timeout=RESULT_SECONDS) for h in handles]
    assert [r.status for r in results] == ["completed"] * 8, [r.error for r in results]
    assert {r.deliverable for r in results} == {"all planned calls ran"}
    for h in handles:
        # What a bare Celery client reads: in the plain backend, delivered after the job's end.
        assert cluster.app.AsyncResult(h.id).get(timeout=RESULT_SECONDS)["status"] == "completed"
        assert len(runs(cluster, h.id, "add")) == 2
    marks = [cluster.store.machine.record(h.id).get("deliver", "") for h in handles]
    assert marks == [""] * 8  # every result delivered, every mark cleared
    # The jobs' keys and the recent-jobs shards spread over the masters (one SCAN per node).
    prefix = cluster.settings.prefix

    def holders(pattern: str) -> set[int]:
        return {
            port for port in redis_cluster.ports if any(redis_cluster.node(port).scan_iter(match=pattern))
        }

    assert len(holders(f"{prefix}:{{*}}:state")) >= 2
    assert len(holders(f"{prefix}:recent:*")) >= 2
    assert {s.job_id for s in cluster.store.recent(50)} == {h.id for h in handles}
    assert len(holders(f"{prefix}:cap:*")) >= 1  # the hosts' capacity keys were written


def test_a_sigkilled_worker_s_jobs_complete_once(on_cluster: Hosts) -> None:
    cluster, _, _ = on_cluster
    cluster.start("thinker", "tools")
    actor = cluster.start("actor", concurrency={"actor": 2})
    handles = [cluster.submit(goal=goal_with_plan(f"killed {i}", PLAN), max_rounds=6) for i in range(8)]
    wait_for(lambda: len(cluster.tool_calls()) >= 3, 90, "some progress")
    cluster.kill(actor, "actor")
    cluster.start("actor", concurrency={"actor": 2})
    results = [h.result(timeout=RESULT_SECONDS) for h in handles]
    assert [r.status for r in results] == ["completed"] * 8, [r.error for r in results]
    for h in handles:
        assert len(runs(cluster, h.id, "add")) == 2  # each call of each round ran once
        assert cluster.app.AsyncResult(h.id).get(timeout=RESULT_SECONDS)["status"] == "completed"


def test_a_job_refused_at_intake_ends_failed_and_is_not_sent_again(on_cluster: Hosts) -> None:
    cluster, _, _ = on_cluster
    group = cluster.start("thinker", "actor", "tools")
    handle = cluster.submit(goal="use a tool nobody has", tools=["no_such_tool"])
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "failed" and "no_such_tool" in (result.error or "")
    # Three stall periods later: its queued record is gone, nothing sent its intake again.
    import time

    time.sleep(3 * float(FAST["TANDEM_STALL_SECONDS"]) + 2)
    assert cluster.store.machine.record(handle.id) == {}
    assert handle.id not in [s.job_id for s in cluster.store.recent(50)]
    logs = "".join((group.log_dir / f"{role}.log").read_text() for role in group.processes)
    assert "CROSSSLOT" not in logs
    assert f"job {handle.id}: still queued" not in logs
    assert logs.count(f"tandem.infer[{handle.id}] received") == 1


def test_tandem_api_lists_and_streams_jobs(on_cluster: Hosts) -> None:
    cluster, _, _ = on_cluster
    cluster.start("thinker", "actor", "tools")
    server = ApiProcess({**cluster.env, "TANDEM_API_TOKENS": TOKEN})
    client = httpx.Client(base_url=server.url, headers=AUTH, timeout=httpx.Timeout(60, read=90))
    try:
        created = client.post(
            "/v1/jobs", json={"goal": goal_with_plan("api on a cluster", PLAN), "max_rounds": 5}
        )
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        events = stream(client, job_id)
        assert events[0]["type"] == "job_started" and events[-1]["type"] == "final"
        assert events[-1]["status"] == "completed"
        assert client.get(f"/v1/jobs/{job_id}").json()["status"]["state"] == "completed"
        assert job_id in [j["job_id"] for j in client.get("/v1/jobs").json()["jobs"]]
    finally:
        client.close()
        server.stop()


def test_bad_cluster_urls_are_one_line(redis_base: str) -> None:
    """A node that is not a member, and a cluster in ``fail`` state."""
    server = own_cluster()
    try:
        plain = redis_base.removeprefix("redis://")
        mixed = Settings.from_env(
            {"TANDEM_REDIS_URL": f"redis+cluster://127.0.0.1:{server.ports[0]},{plain}/"}
        )
        with pytest.raises(RedisClusterError, match=f"node {plain} is not a Redis Cluster node") as caught:
            job_store_client(mixed)
        assert "\n" not in str(caught.value)
        # A worker started on it does not start: the line, and no traceback.
        env = {**os.environ, "TANDEM_BROKER_URL": f"{redis_base}/0", "TANDEM_REDIS_URL": mixed.redis_url}
        worker = subprocess.run(
            [sys.executable, "-m", "tandem.workers.cli", "worker", "thinker", "--no-intake"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        said = [
            line
            for line in (worker.stdout + worker.stderr).splitlines()
            if "not a Redis Cluster node" in line
        ]
        assert worker.returncode != 0 and len(said) == 1, worker.stderr[-2000:]
        assert "Traceback" not in worker.stderr
        server.kill(server.ports[2])
        wait_for(lambda: server.state(server.ports[0]) == "fail", EVENT_SECONDS, "the cluster to notice")
        settings = Settings.from_env({"TANDEM_REDIS_URL": server.url})
        with pytest.raises(RedisClusterError, match="in 'fail' state") as caught:
            job_store_client(settings, socket_connect_timeout=1, socket_timeout=2)
        assert "\n" not in str(caught.value)
    finally:
        server.stop()


def test_threads_past_the_pool_wait_their_turn_on_each_node(redis_cluster: OwnRedisCluster) -> None:
    """A worker's store client on a cluster has a blocking pool of ``max_connections`` per node,
    as on one Redis: a thread finding every connection of a node busy waits for one (up to the
    pool's timeout) instead of failing its step with MaxConnectionsError."""
    import threading
    import time

    settings = Settings.from_env({"TANDEM_REDIS_URL": redis_cluster.url})
    client = job_store_client(settings, max_connections=1, pool_timeout=10)
    key = "{pool-test}:list"
    client.delete(key)
    results: list[object] = []

    def hold() -> None:  # holds the node's one connection for a second
        results.append(client.blpop([key], timeout=1))

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.2)
    started = time.monotonic()
    client.set("{pool-test}:other", "x", ex=60)  # the same node: waits for the held connection
    waited = time.monotonic() - started
    holder.join()
    assert results == [None]
    assert waited > 0.5  # it waited its turn rather than opening a second connection
    assert client.get("{pool-test}:other") == b"x"
    client.close()


def test_a_jobs_pause_is_read_in_one_transaction_on_a_cluster(redis_cluster: OwnRedisCluster) -> None:
    """``JobMachine.pause`` reads the approval record and the pause count in a read-only
    transaction (the job's keys share a slot), not a script: the client Redis user may run it."""
    settings = Settings.from_env({"TANDEM_REDIS_URL": redis_cluster.url})
    store = JobStore(job_store_client(settings), ttl=60)
    job_id = "pause-on-cluster"
    assert store.machine.pause(job_id) == (None, 0)
    store.redis.set(store.key(job_id, "approval"), '{"pending": []}', ex=60)
    store.redis.hset(store.key(job_id, "state"), "pause_seq", "3")
    store.redis.expire(store.key(job_id, "state"), 60)
    assert store.machine.pause(job_id) == ('{"pending": []}', 3)
