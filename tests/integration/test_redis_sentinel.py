"""The broker, the result backend and the job state on one Redis whose master Sentinel elects
(a primary, a replica and three Sentinels started here, ``tests.integration.redis_sentinel``).

``TANDEM_BROKER_URL``, ``TANDEM_RESULT_BACKEND`` and ``TANDEM_REDIS_URL`` are all
``redis+sentinel://<three Sentinels>/svc/0``. A job completes; the primary is SIGKILLed while jobs
run; once the Sentinels have promoted the replica, no worker has exited and jobs submitted after
the failover complete, their Celery results readable by a bare Celery client. The tools record
their calls in a database of the shared plain Redis, which the failover does not touch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from redis import Redis

from tandem.broker_config import Settings
from tandem.broker_config.errors import SettingsError
from tandem.broker_config.job_redis import job_store_client
from tandem.broker_config.sentinel import SentinelUrl
from tandem.broker_config.sentinel_clients import check_service
from tandem.workers.health import check
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _cluster_on, _exclusive_db
from tests.integration.plan_model import goal_with_plan
from tests.integration.redis_sentinel import SERVICE, OwnSentinelGroup, SentinelUnsupported
from tests.integration.test_durability import runs, wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
FAST = {"TANDEM_LEASE_SECONDS": "2", "TANDEM_STALL_SECONDS": "3", "TANDEM_TOOL_TIMEOUT": "30"}
PLAN = [[{"name": "add", "args": {"a": 2, "b": 3}}], [{"name": "add", "args": {"a": 1, "b": 1}}]]
SLOW = [[{"name": "sleep_tool", "args": {"seconds": 1}}], [{"name": "add", "args": {"a": 1, "b": 1}}]]
"""A plan whose first round holds a tools thread for a second: jobs still run at the kill."""


def own_group(password: str | None = None, sentinel_password: str | None = None) -> OwnSentinelGroup:
    """A started Sentinel group, or a skip (a failure in CI) saying what is missing."""
    try:
        return OwnSentinelGroup(password, sentinel_password).start()
    except SentinelUnsupported as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Sentinel group can be started: {exc}")
        pytest.skip(f"no Sentinel group can be started: {exc}")


@pytest.fixture
def sentinel_group(redis_base: str) -> Iterator[OwnSentinelGroup]:
    group = own_group()
    try:
        yield group
    finally:
        group.stop()


@pytest.fixture
def on_sentinel(redis_base: str, sentinel_group: OwnSentinelGroup) -> Iterator[Hosts]:
    """Workers whose three URLs are the group's Sentinel URL; tool calls recorded on a plain database."""
    with _exclusive_db() as db:
        plain = f"{redis_base}/{db}"
        Redis.from_url(plain).flushdb()
        gen = _cluster_on(sentinel_group.url(0), TEST_CALLS_REDIS_URL=plain, **FAST)
        cluster, thinker, actor = next(gen)
        try:
            yield cluster, thinker, actor
        finally:
            next(gen, None)  # stops the workers, checks every key's TTL on the master of the moment
            Redis.from_url(plain).flushdb()


def test_workers_ride_a_failover_and_jobs_submitted_after_it_complete(
    on_sentinel: Hosts, sentinel_group: OwnSentinelGroup
) -> None:
    cluster, _, _ = on_sentinel
    assert cluster.app.conf.broker_url == f"sentinel://127.0.0.1:{sentinel_group.sentinel_ports[0]}/0"
    assert cluster.app.conf.broker_transport == "tandem.broker_config.transport:SentinelTransport"
    assert cluster.app.conf.result_backend.count("sentinel://") == 3
    cluster.start("thinker", "actor", "tools")

    first = cluster.submit(goal=goal_with_plan("before the failover", PLAN), max_rounds=5)
    assert first.result(timeout=RESULT_SECONDS).status == "completed"
    assert cluster.app.AsyncResult(first.id).get(timeout=RESULT_SECONDS)["status"] == "completed"
    assert sentinel_group.node(sentinel_group.primary_port).exists(f"celery-task-meta-{first.id}") == 1

    # Jobs in flight: the primary dies once the first of their tool calls has ended.
    flight = [cluster.submit(goal=goal_with_plan(f"in flight {i}", SLOW), max_rounds=6) for i in range(4)]
    wait_for(
        lambda: any(c["name"] == "sleep_tool" for c in cluster.tool_calls()), EVENT_SECONDS, "a tool call"
    )
    sentinel_group.kill(sentinel_group.primary_port)
    wait_for(
        lambda: sentinel_group.agreed_master() == sentinel_group.replica_port,
        EVENT_SECONDS,
        "the Sentinels to promote the replica",
    )
    assert cluster.exited() == [], "a worker exited during the failover"

    after = [cluster.submit(goal=goal_with_plan(f"after {i}", PLAN), max_rounds=5) for i in range(4)]
    results = [h.result(timeout=RESULT_SECONDS) for h in after]
    assert [r.status for r in results] == ["completed"] * 4, [r.error for r in results]
    for h in after:
        assert cluster.app.AsyncResult(h.id).get(timeout=RESULT_SECONDS)["status"] == "completed"
        assert len(runs(cluster, h.id, "add")) == 2
    new_master = sentinel_group.node(sentinel_group.replica_port)
    assert all(new_master.exists(f"celery-task-meta-{h.id}") for h in after)

    # The jobs in flight at the kill, submitted well before it (their records had reached the
    # replica): each completes. A step whose lease ran out during the outage was sent again by the
    # reconciler, so its tool call may have run twice (``sleep_tool`` is not ``at_most_once``); the
    # second round's call ran once. (Writes the primary had not yet replicated when it died are
    # lost: docs/durability.md#a-redis-failover; with TANDEM_REDIS_WAIT_REPLICAS=1 no at_most_once call runs
    # twice: tests/integration/test_redis_wait_replicas.py.)
    ended = [h.result(timeout=RESULT_SECONDS) for h in flight]
    assert [r.status for r in ended] == ["completed"] * 4, [r.error for r in ended]
    assert all(1 <= len(runs(cluster, h.id, "sleep_tool")) <= 2 for h in flight)
    assert [len(runs(cluster, h.id, "add")) for h in flight] == [1] * 4
    assert cluster.exited() == [], "a worker exited after the failover"


def test_one_url_reaches_the_master_through_any_live_sentinel(sentinel_group: OwnSentinelGroup) -> None:
    """The job store's blocking pool, ``tandem health`` and a Sentinel down among those named."""
    settings = Settings.from_env({"TANDEM_BROKER_URL": sentinel_group.url(5)})
    assert settings.redis_url == settings.result_backend == sentinel_group.url(5)
    client = job_store_client(settings, max_connections=1, pool_timeout=10)
    client.set("sentinel-test", "here", ex=60)
    primary = Redis(host="127.0.0.1", port=sentinel_group.primary_port, db=5)
    assert primary.get("sentinel-test") == b"here"

    # One connection: a second thread waits its turn (for the BLPOP holding it to end) instead of
    # failing with "Too many connections" or opening a second one.
    results: list[object] = []
    holder = threading.Thread(target=lambda: results.append(client.blpop(["sentinel-list"], timeout=1)))
    holder.start()
    wait_for(lambda: _blocked(primary), EVENT_SECONDS, "the BLPOP to block")
    assert client.get("sentinel-test") == b"here"
    assert results == [None]  # the GET had the connection only once the BLPOP had given it back
    holder.join()

    answers = check(settings, timeout=5)
    assert [(a.setting, a.ok) for a in answers] == [("TANDEM_REDIS_URL", True), ("TANDEM_BROKER_URL", True)]
    assert all(a.url.startswith("redis+sentinel://") for a in answers)

    # The first Sentinel named is down: the others answer, and the service is still known.
    sentinel_group.kill(sentinel_group.sentinel_ports[0])
    again = job_store_client(settings, socket_connect_timeout=2, socket_timeout=5)
    assert again.get("sentinel-test") == b"here"
    check_service(SentinelUrl.parse(settings.redis_url), "TANDEM_REDIS_URL", timeout=2)
    client.close()
    again.close()


def test_a_job_completes_with_passwords_on_the_master_and_on_the_sentinels(redis_base: str) -> None:
    """The master's password from the URL's user part reaches kombu, Celery and redis-py; the
    Sentinels' own (``?sentinel_password=``) reaches their ``sentinel_kwargs`` (without it, every
    client would find "No master found")."""
    group = own_group(password="master-secret", sentinel_password="sentinel-secret")
    try:
        bare = SentinelUrl.parse(group.url(0).partition("?")[0])
        with pytest.raises(SettingsError, match=r"refuses the client .*\?sentinel_password=") as caught:
            check_service(bare, "TANDEM_REDIS_URL", timeout=2)
        assert "master-secret" not in str(caught.value)
        with _exclusive_db() as db:
            plain = f"{redis_base}/{db}"
            gen = _cluster_on(group.url(0), TEST_CALLS_REDIS_URL=plain, **FAST)
            cluster, _, _ = next(gen)
            try:
                cluster.start("thinker", "actor", "tools")
                handle = cluster.submit(goal=goal_with_plan("with passwords", PLAN), max_rounds=5)
                assert handle.result(timeout=RESULT_SECONDS).status == "completed"
                assert cluster.app.AsyncResult(handle.id).get(timeout=RESULT_SECONDS)["status"] == "completed"
                assert group.node(group.primary_port).exists(f"celery-task-meta-{handle.id}") == 1
            finally:
                next(gen, None)
                Redis.from_url(plain).flushdb()
    finally:
        group.stop()


def test_a_worker_on_a_service_the_sentinels_do_not_know_does_not_start(
    redis_base: str, sentinel_group: OwnSentinelGroup
) -> None:
    """A misspelt service would fail every command for ever: the worker says so in one line."""
    wrong = sentinel_group.url(0).replace(f"/{SERVICE}/", "/svc-typo/")
    with pytest.raises(SettingsError, match=r"monitor no master named 'svc-typo' \(they know \['svc'\]\)"):
        check_service(SentinelUrl.parse(wrong), "TANDEM_REDIS_URL", timeout=2)
    env = {**os.environ, "TANDEM_BROKER_URL": f"{redis_base}/0", "TANDEM_REDIS_URL": wrong}
    worker = subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", "worker", "thinker", "--no-intake"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = [line for line in worker.stderr.splitlines() if "monitor no master named 'svc-typo'" in line]
    assert worker.returncode == 2 and len(said) == 1, worker.stderr[-2000:]
    assert said[0].startswith("tandem: TANDEM_REDIS_URL=") and "Traceback" not in worker.stderr


def _blocked(client: Redis) -> bool:
    return any(c.get("cmd") == "blpop" for c in client.client_list())
