"""Breaking tests of the intake lanes (docs/tenants.md, "Intake lanes"; ``TANDEM_INTAKE_LANES``),
written from the docs: where tandem's submitters put a tenant's job (``celery.lane<i>``, ``i`` the
first 8 bytes of SHA-256 of the tenant, big-endian, modulo N), that a bare client sending
``tandem.infer`` by name still gets its job run, that a burst of one tenant at any one priority
level does not hold back another's intake, that a bad value stops a worker at start naming it, and
that ``tandem health`` counts the lanes in the intake queue's depth."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
from redis import Redis

from tandem.broker_config import Settings
from tandem.client.handle import JobHandle
from tandem.client.submission import submit
from tandem.tasks.app import create_app
from tandem.tasks.state.store import JobStore
from tests.integration import bare_client
from tests.integration.acl_client import client_user
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.test_api import ApiProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
N = 8
LEVELS = ("", *(f"\x06\x16{n}" for n in range(1, 10)))
"""The suffixes of a kombu queue's ten lists on Redis, one per priority level (docs/brokers.md)."""


def lane_of(tenant: str, lanes: int = N) -> str:
    """The lane docs/tenants.md gives a tenant's jobs."""
    index = int.from_bytes(hashlib.sha256(tenant.encode("utf-8")).digest()[:8], "big") % lanes
    return f"celery.lane{index}"


def ids_in(redis: Redis, queue: str) -> list[str]:
    """The task ids of the messages waiting in ``queue`` (all its priority lists)."""
    found = []
    for level in LEVELS:
        for raw in redis.lrange(queue + level, 0, -1):
            found.append(json.loads(raw)["headers"]["id"])
    return found


def waiting(redis: Redis) -> dict[str, list[str]]:
    """Every intake list that holds a message: its queue (lane) name and the messages' task ids."""
    names = [k.decode() for k in redis.scan_iter(match="celery*") if redis.type(k) == b"list"]
    queues = {n.split("\x06")[0] for n in names}
    return {q: sorted(ids_in(redis, q)) for q in sorted(queues) if ids_in(redis, q)}


def client_env(url: str, **extra: str) -> dict[str, str]:
    return {"TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url, "TANDEM_REDIS_URL": url, **extra}


def test_tandems_submitters_send_a_tenants_job_to_its_lane(url: str) -> None:
    settings = Settings.from_env(client_env(url, TANDEM_INTAKE_LANES=str(N)))
    app = create_app(settings)
    redis = Redis.from_url(url)
    store = JobStore(redis, settings.prefix)
    try:
        sent: dict[str, list[str]] = {}
        for tenant, priority in (("tenant-a", 5), ("tenant-b", 9), ("tenant-b", 0), ("default", 5)):
            handle = submit(
                {"goal": "x", "reasoner": "mono", "owner": tenant, "priority": priority}, app=app, store=store
            )
            sent.setdefault(lane_of(tenant), []).append(handle.id)
        handle = submit(
            {"goal": "no owner", "reasoner": "mono"}, app=app, store=store
        )  # the `default` tenant
        sent.setdefault(lane_of("default"), []).append(handle.id)
    finally:
        app.close()
    assert waiting(redis) == {lane: sorted(ids) for lane, ids in sent.items()}


def test_the_api_sends_a_tokens_tenants_job_to_its_lane(url: str) -> None:
    tokens = {"token-of-team-a-0123456789": {"tenant": "team-a", "scopes": ["submit", "read"]}}
    server = ApiProcess(
        {**os.environ, **client_env(url, TANDEM_INTAKE_LANES=str(N), TANDEM_API_TOKENS=json.dumps(tokens))}
    )
    try:
        auth = {"Authorization": "Bearer token-of-team-a-0123456789"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=60) as api:
            created = api.post("/v1/jobs", json={"goal": "x", "reasoner": "mono", "max_rounds": 2})
            assert created.status_code in (200, 201, 202), created.text
    finally:
        server.stop()
    assert waiting(Redis.from_url(url)) == {lane_of("team-a"): [created.json()["id"]]}


@pytest.fixture
def lanes_cluster(redis_base: str) -> Iterator[Cluster]:
    for cluster, _thinker, _actor in _make_cluster(redis_base, TANDEM_INTAKE_LANES=str(N)):
        yield cluster


def test_a_bare_client_that_knows_only_the_task_name_still_gets_its_job_run(lanes_cluster: Cluster) -> None:
    c = lanes_cluster
    c.start("actor")  # mono jobs: the Actor worker, which consumes the intake queue and its lanes
    spec = {"goal": "a bare job", "reasoner": "mono", "max_rounds": 4}
    sent = bare_client.send(
        c.url, [{"name": "bare", "task": "tandem.infer", "kwargs": {"spec": spec}}], wait_for=RESULT_SECONDS
    )
    outcome = sent["outcomes"]["bare"]
    assert outcome["state"] == "SUCCESS", outcome
    assert outcome["result"]["status"] == "completed", outcome
    assert c.store.result(outcome["id"]).status == "completed"  # type: ignore[union-attr]


@pytest.mark.parametrize("priority", [9, 0])
def test_a_burst_at_one_priority_does_not_hold_back_another_tenants_intake(
    lanes_cluster: Cluster, priority: int
) -> None:
    c = lanes_cluster
    assert lane_of("tenant-a") != lane_of("tenant-b")
    burst = [
        c.submit(goal=f"a job {i}", reasoner="mono", owner="tenant-a", priority=priority) for i in range(40)
    ]
    late = [
        c.submit(goal=f"b job {i}", reasoner="mono", owner="tenant-b", priority=priority) for i in range(4)
    ]
    c.start("tools", concurrency={"tools": 1})  # one intake thread; no Actor: each job waits once created
    deadline = time.monotonic() + EVENT_SECONDS
    created: dict[str, float] = {}
    while len(created) < 44 and time.monotonic() < deadline:
        for handle in burst + late:
            record = c.redis.hgetall(c.store.key(handle.id, "state"))
            if b"created_at" in record and record.get(b"state") not in (None, b"queued"):
                created[handle.id] = float(record[b"created_at"])
        time.sleep(0.1)
    assert len(created) == 44, f"only {len(created)} of 44 jobs were taken from the intake"
    last_b = max(created[h.id] for h in late)
    a_after = sum(1 for h in burst if created[h.id] > last_b)
    assert a_after >= 30, f"only {a_after} of A's 40 jobs (priority {priority}) were read after B's last one"


def _worker_exits(argv: list[str], value: str) -> str:
    env = {
        **os.environ,
        "TANDEM_INTAKE_LANES": value,
        "TANDEM_BROKER_URL": "redis://127.0.0.1:1/0",  # nothing answers: a worker that starts waits for it
        "PYTHONPATH": str(ROOT),
    }
    try:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{argv} with TANDEM_INTAKE_LANES={value!r} did not stop at start") from exc
    assert out.returncode != 0, (argv, value)
    return out.stderr + out.stdout


@pytest.mark.parametrize("value", ["65", "eight", "-1", "2.5"])
def test_a_bad_lanes_value_stops_the_worker_at_start_naming_it(value: str) -> None:
    argv = [sys.executable, "-m", "tandem.workers.cli", "worker", "actor"]
    text = _worker_exits(argv, value)
    naming = [line for line in text.splitlines() if "TANDEM_INTAKE_LANES" in line and value in line]
    assert naming, text[-2000:]


def test_a_bad_lanes_value_stops_a_plain_celery_worker_too() -> None:
    argv = [sys.executable, "-m", "celery", "-A", "tandem.tasks.app", "worker", "-P", "solo"]
    text = _worker_exits(argv, "65")
    assert [line for line in text.splitlines() if "TANDEM_INTAKE_LANES" in line and "65" in line], text[
        -2000:
    ]


def _health(url: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", "health", "--timeout", "5"],
        capture_output=True,
        text=True,
        env={**os.environ, **client_env(url), **env},
        timeout=60,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_health_counts_the_lanes_in_the_intake_depth(url: str) -> None:
    settings = Settings.from_env(client_env(url, TANDEM_INTAKE_LANES=str(N)))
    app = create_app(settings)
    store = JobStore(Redis.from_url(url), settings.prefix)
    handles: list[JobHandle] = []
    try:
        for tenant, priority in (("tenant-a", 5), ("tenant-a", 9), ("tenant-b", 0), ("tenant-c", 5)):
            handles.append(
                submit(
                    {"goal": "x", "reasoner": "mono", "owner": tenant, "priority": priority},
                    app=app,
                    store=store,
                )
            )
    finally:
        app.close()
    bare: dict[str, Any] = {
        "name": "bare",
        "task": "tandem.infer",
        "kwargs": {"spec": {"goal": "y"}},
        "wait": False,
    }
    bare_client.send(url, [bare], wait_for=1)
    queued = waiting(Redis.from_url(url))
    assert sum(len(ids) for ids in queued.values()) == 5 and len(queued.get("celery", [])) == 1, queued
    line = _health(url, TANDEM_INTAKE_LANES=str(N))
    assert "messages waiting: celery 5, thinker 0, actor 0, tools 0" in line, line


@pytest.fixture
def laneless_cluster(redis_base: str) -> Iterator[Cluster]:
    """Workers without lanes that send a lost intake message again after 20 s of no progress (the
    CLI's hint looks after 3 s: a shorter stall could take the job before it looks)."""
    for cluster, _thinker, _actor in _make_cluster(redis_base, TANDEM_STALL_SECONDS="20"):
        yield cluster


def test_a_client_with_lanes_its_workers_lack_is_told_and_its_job_still_runs(
    laneless_cluster: Cluster,
) -> None:
    c = laneless_cluster
    c.start("actor")
    env = {**os.environ, **c.env, "TANDEM_INTAKE_LANES": str(N), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "tandem.workers.cli", "run", "a job in a lane", "--reasoner", "mono"]
    done = subprocess.run(
        [*argv, "--max-rounds", "4", "--json", "--no-tokens", "--timeout", str(RESULT_SECONDS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=RESULT_SECONDS + 60,
        cwd=ROOT,
    )
    text = done.stderr + done.stdout
    lane = lane_of("default")
    told = [line for line in text.splitlines() if f"no worker consumes queue '{lane}' yet" in line]
    assert told and "TANDEM_INTAKE_LANES" in told[0], text[-3000:]
    assert done.returncode == 0, text[-3000:]  # the reconciler sent it again, to the intake queue itself
    assert '"status": "completed"' in done.stdout or '"status":"completed"' in done.stdout, done.stdout[
        -2000:
    ]


def test_health_as_the_client_user_counts_the_lanes(url: str) -> None:
    settings = Settings.from_env(client_env(url, TANDEM_INTAKE_LANES=str(N)))
    app = create_app(settings)
    try:
        for tenant in ("tenant-a", "tenant-b", "tenant-b"):
            submit(
                {"goal": "x", "reasoner": "mono", "owner": tenant},
                app=app,
                store=JobStore(Redis.from_url(url), "tandem"),
            )
    finally:
        app.close()
    holder = cast(Cluster, SimpleNamespace(redis=Redis.from_url(url), url=url))
    with client_user(holder) as user:
        login = user.connection_pool.connection_kwargs
        as_user = url.replace("redis://", f"redis://{login['username']}:{login['password']}@")
        line = _health(as_user, TANDEM_INTAKE_LANES=str(N))
    assert "messages waiting: celery 3, thinker 0, actor 0, tools 0" in line, line
