"""Integration fixtures: a real Redis, real ``celery worker`` processes, local model hosts.

The tests skip when no Redis answers at ``TANDEM_TEST_REDIS_URL`` (default
``redis://127.0.0.1:6379``), except in CI (``CI=true``), where a missing Redis is a failure.
Each cluster uses its own Redis database and stops its workers by pid.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from redis import Redis

from tandem.broker_config import Settings
from tandem.broker_config.sentinel import SentinelUrl, is_sentinel_url
from tandem.broker_config.sentinel_clients import sentinel_client
from tandem.client.handle import JobHandle
from tandem.client.submission import submit
from tandem.tasks.app import create_app
from tandem.tasks.state.store import JobStore
from tandem.workers.embedded import WorkerGroup, redis_answers
from tests.integration import plan_model
from tests.integration.rabbitmq import vhost_url  # noqa: F401 - a fixture: a RabbitMQ vhost per test
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

BASE_URL = os.environ.get("TANDEM_TEST_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")
TEST_DBS = (1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15)
"""The databases clusters take, one each: not 0 (the default URL, and unit tests under their own
key prefixes), 4 (``bench``, flushed by every benchmark) or 8 (the state-machine unit tests).
Parallel runs (``make test`` runs several pytest processes) and other engineers' runs share them."""
READY_SECONDS = 600.0
"""How long a cluster waits for its workers' ready signals (``WorkerGroup.wait_ready``): a worker
that imports LiteLLM needs 2-5 s of CPU to start, and ``make test`` starts several clusters at once
on a machine other work shares. Waiting costs nothing when they are ready sooner; a worker that
exits fails the wait at once."""
RESULT_SECONDS = 600.0
"""How long a test waits for a job it expects to end (``JobHandle.result(timeout=...)``): the wait
ends with the job, so a generous bound costs nothing on a quiet machine and spares a loaded one
a failure that says only "slow"."""
EVENT_SECONDS = 120.0
"""How long a test waits for one thing a worker does (a message taken, a queue drained, a log
line, a step parked): seconds on a quiet machine, so this bound only ends a wait that would never
end, with a message saying what did not happen."""
DB_WAIT_SECONDS = 600.0
"""How long a cluster waits for a free database before the test fails: on a machine where every
database is taken, one frees when another test ends, so waiting beats failing."""


@contextmanager
def _exclusive_db() -> Iterator[int]:
    """A Redis database number no other test process on this machine is using (a lock file per
    database, held while in use): queues are per database, so two clusters sharing one would take
    each other's tasks. Waits for one to free when all are taken."""
    deadline = time.monotonic() + DB_WAIT_SECONDS
    while True:
        for db in TEST_DBS:
            handle = open(f"/tmp/tandem-test-redis-db-{db}.lock", "w")  # noqa: SIM115 - held while in use
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield db
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"every test Redis database {list(TEST_DBS)} was in use by other tests for "
                f"{DB_WAIT_SECONDS:g} s (lock files /tmp/tandem-test-redis-db-*.lock)"
            )
        time.sleep(0.2)


@pytest.fixture(scope="session")
def redis_base() -> str:
    """The test Redis server's URL (without a database)."""
    if not redis_answers(f"{BASE_URL}/0"):
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Redis answers at {BASE_URL}: CI needs one (see .ci/run)")
        pytest.skip(f"no Redis answers at {BASE_URL}")
    return BASE_URL


def url_client(url: str) -> Redis:
    """A plain client of ``url``; for a Sentinel URL (``tandem.broker_config.sentinel``), of the
    master the Sentinels name at each new connection."""
    if is_sentinel_url(url):
        return sentinel_client(SentinelUrl.parse(url), socket_timeout=30, socket_connect_timeout=5)
    return Redis.from_url(url)


def actor_host(request: RecordedRequest) -> Reply:
    """The Actor role's host: the actor script, or the mono script for mono jobs."""
    if "on your own" in str(request["messages"][0]["content"]):
        return plan_model.mono(request)
    return plan_model.actor(request)


@pytest.fixture
def url(redis_base: str) -> Iterator[str]:
    """The URL of a Redis database of the test's own (``_exclusive_db``), empty before and after:
    for tests of the broker's transport that need no cluster."""
    with _exclusive_db() as db:
        own = f"{redis_base}/{db}"
        Redis.from_url(own).flushdb()
        yield own
        Redis.from_url(own).flushdb()


class Cluster:
    """Workers on one Redis database plus the thinker and actor model hosts."""

    def __init__(self, url: str, env: dict[str, str]) -> None:
        self.url = url
        self.env = env
        self.settings = Settings.from_env(env)
        self.app = create_app(self.settings)
        self.redis = url_client(url)
        self.calls = url_client(env.get("TEST_CALLS_REDIS_URL") or url)
        """Where the test tools record their calls (``tests.integration.tools``)."""
        self.store = JobStore(self.redis, self.settings.prefix)
        self.groups: list[WorkerGroup] = []
        self.killed: set[int] = set()
        """The pids of the workers the test killed on purpose (``kill``)."""

    def start(
        self,
        *roles: str,
        concurrency: dict[str, int] | None = None,
        name: str | None = None,
        pool: str | None = None,
        **extra_env: str,
    ) -> WorkerGroup:
        """Start one worker per role (each consumes its queue and the intake queue); ``name``
        tells apart several groups of one role; ``pool`` is their pool (threads by default)."""
        group = WorkerGroup(
            roles,
            env={**self.env, **extra_env},
            loglevel="INFO",
            concurrency=concurrency,
            name=name,
            pool=None if pool is None else dict.fromkeys(roles, pool),
        )
        group.start()
        self.groups.append(group)
        group.wait_ready(self.app, timeout=READY_SECONDS)
        return group

    def submit(self, **spec: Any) -> JobHandle:
        """Submit a job through ``tandem.tasks.submit``."""
        return submit(spec, app=self.app, store=self.store)

    def tool_calls(self) -> list[dict[str, Any]]:
        """What the test tools recorded, in order."""
        return [json.loads(x) for x in self.calls.lrange("test:calls", 0, -1)]

    def kill(self, group: WorkerGroup, role: str) -> None:
        """SIGKILL a worker process (on purpose: it does not count as a worker that exited)."""
        proc = group.processes[role]
        # A worker that died by itself before the kill must not pass for one the test killed.
        assert proc.poll() is None, f"the {role} worker (pid {proc.pid}) exited by itself before the kill"
        self.killed.add(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop_group(self, group: WorkerGroup) -> None:
        """Stop one group mid-test (a warm shutdown, on purpose), after checking that no worker of
        the cluster exited by itself before: its pids then count as stopped, not as exited."""
        assert self.exited() == [], f"workers exited by themselves during the test: {self.exited()}"
        group.stop()
        self.killed.update(proc.pid for proc in group.processes.values())

    def exited(self) -> list[str]:
        """The workers that exited by themselves: neither killed by the test nor stopped."""
        return [
            f"{role} worker of group {group.name} (pid {proc.pid}) exited with code {proc.returncode}; "
            f"its log: {group.log_dir / (role + '.log')}"
            for group in self.groups
            for role, proc in group.processes.items()
            if proc.poll() is not None and proc.pid not in self.killed
        ]

    def stop(self) -> None:
        """Stop every worker started here; fail if any had exited by itself (a worker must
        outlive every fault a test injects, but the kills it makes on purpose)."""
        gone = self.exited()
        for group in self.groups:
            group.stop()
        self.app.close()
        assert not gone, f"workers exited by themselves during the test: {gone}"


HostScript = Any
"""What an ``OpenAIServer`` answers with (``tests.openai_server``: a reply, a list, a callable)."""


def _make_cluster(
    redis_base: str, *, thinker_script: HostScript = None, actor_script: HostScript = None, **env: str
) -> Iterator[tuple[Cluster, OpenAIServer, OpenAIServer]]:
    """A cluster on a database of its own (see ``_cluster_on``)."""
    with _exclusive_db() as db:
        yield from _cluster_on(
            f"{redis_base}/{db}", thinker_script=thinker_script, actor_script=actor_script, **env
        )


def _cluster_on(
    url: str, *, thinker_script: HostScript = None, actor_script: HostScript = None, **env: str
) -> Iterator[tuple[Cluster, OpenAIServer, OpenAIServer]]:
    """A cluster on ``url`` with two local hosts, answering as ``thinker_script`` and
    ``actor_script`` (by default the plan model's Thinker and ``actor_host``), and ``env`` over the
    base settings; on the way out its workers are stopped and every tandem key must have had a TTL."""
    url_client(url).flushdb()
    thinker_script = plan_model.thinker if thinker_script is None else thinker_script
    actor_script = actor_host if actor_script is None else actor_script
    with OpenAIServer(thinker_script) as thinker, OpenAIServer(actor_script) as actor:
        base_env = {
            "TANDEM_BROKER_URL": url,
            "TANDEM_RESULT_BACKEND": url,
            "TANDEM_REDIS_URL": url,
            "TANDEM_TOOLKIT": "tests.integration.tools:toolkit",
            "TANDEM_THINKER_MODEL": "openai/thinker-model",
            "TANDEM_THINKER_API_BASE": thinker.url,
            "TANDEM_THINKER_API_KEY": "test-key",
            "TANDEM_ACTOR_MODEL": "openai/actor-model",
            "TANDEM_ACTOR_API_BASE": actor.url,
            "TANDEM_ACTOR_API_KEY": "test-key",
            "TANDEM_TOOL_TIMEOUT": "2",
            **env,
        }
        cluster = Cluster(url, base_env)
        try:
            yield cluster, thinker, actor
        finally:
            cluster.stop()
            client = url_client(url)
            prefix = cluster.settings.prefix
            untimed = [k.decode() for k in client.scan_iter(match=f"{prefix}:*") if client.ttl(k) < 0]
            client.flushdb()
        assert not untimed, f"tandem keys without a TTL after the test: {untimed}"


@pytest.fixture(scope="module")
def dual_cluster(redis_base: str) -> Iterator[tuple[Cluster, OpenAIServer, OpenAIServer]]:
    """Thinker, actor and tools workers, one each, shared by a module's tests."""
    gen = _make_cluster(redis_base)
    cluster, thinker, actor = next(gen)
    cluster.start("thinker", "actor", "tools")
    yield cluster, thinker, actor
    next(gen, None)  # runs the teardown to its end, with its check of the keys' TTLs


@pytest.fixture
def fresh_cluster(redis_base: str) -> Iterator[tuple[Cluster, OpenAIServer, OpenAIServer]]:
    """A cluster with no workers yet, for tests that start and kill their own."""
    yield from _make_cluster(redis_base, TANDEM_LEASE_SECONDS="2")
