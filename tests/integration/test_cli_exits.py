"""The ``tandem`` command against real services: each outcome of a job has its exit status, the
broker down with Redis up is one line, readiness follows Redis going away and coming back, and a
job whose queue no worker consumes says so (``tandem.workers.exit_codes``, ``queue_hint``).

Redis is a server of the test's own (``OwnRedis``, on a free port) where a test stops it, never
the shared one; the jobs run on a cluster's own database with the plan-following model hosts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis

from tandem.workers import exit_codes
from tandem.workers.embedded import free_port, stop_process
from tests.integration.chaos import OwnRedis
from tests.integration.conftest import Cluster
from tests.openai_server import OpenAIServer, Reply

pytestmark = pytest.mark.integration


def tandem(*argv: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")}
    return subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", *argv],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=timeout,
        cwd="/",
    )


def spawn(*argv: str, env: dict[str, str]) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")}
    return subprocess.Popen(
        [sys.executable, "-m", "tandem.workers.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean, **env},
        cwd="/",
    )


@pytest.fixture
def own_redis(redis_base: str) -> Iterator[OwnRedis]:
    server = OwnRedis(appendonly=False).start()
    yield server
    server.stop()


def on(server: OwnRedis) -> dict[str, str]:
    url = f"{server.base}/0"
    return {"TANDEM_REDIS_URL": url, "TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url}


def test_the_broker_down_with_redis_up_is_one_line_and_nothing_is_stored(own_redis: OwnRedis) -> None:
    env = {**on(own_redis), "TANDEM_BROKER_URL": f"amqp://guest:guest-pass@127.0.0.1:{free_port()}//"}
    done = tandem("run", "count the words", env=env)
    assert done.returncode == exit_codes.UNREACHABLE, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("tandem: the broker at amqp://guest:**@127.0.0.1:")
    assert "does not answer ([Errno 111] Connection refused)" in line
    assert line.endswith("start RabbitMQ there, or set TANDEM_BROKER_URL to one that answers")
    assert Redis.from_url(f"{own_redis.base}/0").dbsize() == 0  # no job left to be sent later


def test_readiness_follows_redis_stopping_and_starting_again(own_redis: OwnRedis) -> None:
    env = on(own_redis)
    up = tandem("health", "--timeout", "2", env=env)
    assert up.returncode == 0 and up.stdout.startswith("tandem health: ok: "), up.stderr
    port = own_redis.port
    stop_process(own_redis.process)  # stopped, its files kept for the start again
    started = time.monotonic()
    down = tandem("health", "--timeout", "2", env=env)
    assert down.returncode == exit_codes.UNREACHABLE and down.stdout == ""
    [line] = down.stderr.splitlines()
    assert f"Redis (redis://127.0.0.1:{port}/0) failed: " in line and "refused" in line.lower()
    assert f"the broker (redis://127.0.0.1:{port}/0) failed: " in line
    assert time.monotonic() - started < 20
    own_redis.start()
    again = tandem("health", "--timeout", "2", env=env)
    assert again.returncode == 0, again.stderr


def test_a_job_no_worker_takes_gets_a_hint_and_a_cancelled_job_exits_4(own_redis: OwnRedis) -> None:
    env = on(own_redis)
    run = spawn("run", "count the words", "--timeout", "60", env=env)
    assert run.stdout is not None and run.stderr is not None
    submitted = run.stdout.readline()
    assert submitted.startswith("job ") and submitted.endswith(" submitted\n"), submitted
    job_id = submitted.split()[1]
    hint = run.stderr.readline()  # after the grace period; the job is not failed for it
    assert hint.startswith(f"tandem: no worker consumes queue 'celery' yet (job {job_id} waits there)")
    assert "`tandem worker all`" in hint
    cancel = tandem("cancel", job_id, env=env)
    assert cancel.returncode == 0, cancel.stderr
    out, err = run.communicate(timeout=60)
    assert run.returncode == exit_codes.JOB_CANCELLED, out + err
    assert "CANCELLED" in out and err == ""


@pytest.fixture(scope="module")
def actor_only(redis_base: str) -> Iterator[tuple[Cluster, OpenAIServer]]:
    """One actor worker (it consumes the actor and intake queues), no Thinker, no tools."""
    from tests.integration.conftest import _make_cluster

    gen = _make_cluster(redis_base)
    cluster, _thinker, actor = next(gen)
    cluster.start("actor")
    yield cluster, actor
    next(gen, None)


def cluster_env(cluster: Cluster) -> dict[str, str]:
    return {k: v for k, v in cluster.env.items() if k.startswith("TANDEM_")}


def test_completed_exits_0_and_truncated_exits_5(actor_only: tuple[Cluster, Any]) -> None:
    cluster, _ = actor_only
    env = cluster_env(cluster)
    done = tandem("run", "say hello", "--reasoner", "mono", "--no-tokens", env=env)
    assert done.returncode == exit_codes.OK, done.stdout + done.stderr
    assert "mono plan done" in done.stdout
    cut = tandem("run", "NEVER_DONE", "--reasoner", "mono", "--max-rounds", "1", env=env)
    assert cut.returncode == exit_codes.JOB_TRUNCATED, cut.stdout + cut.stderr
    assert "TRUNCATED" in cut.stdout


def test_a_failed_job_exits_1(actor_only: tuple[Cluster, OpenAIServer]) -> None:
    cluster, actor = actor_only
    actor.set_script(Reply(status=400, error="the model does not exist"))
    try:
        done = tandem("run", "say hello", "--reasoner", "mono", env=cluster_env(cluster))
    finally:
        from tests.integration.conftest import actor_host

        actor.set_script(actor_host)
    assert done.returncode == exit_codes.JOB_FAILED, done.stdout + done.stderr
    assert "FAILED" in done.stdout


def test_a_dual_job_with_no_thinker_worker_names_the_thinker_queue(actor_only: tuple[Cluster, Any]) -> None:
    cluster, _ = actor_only
    run = spawn("run", "say hello", "--timeout", "10", env=cluster_env(cluster))
    assert run.stdout is not None and run.stderr is not None
    job_id = run.stdout.readline().split()[1]
    out, err = run.communicate(timeout=90)
    hint, timed_out = err.splitlines()  # the job is not failed for it: it waits, until --timeout
    assert hint.startswith(f"tandem: no worker consumes queue 'thinker' yet (job {job_id} waits there)")
    assert "start one with `tandem worker thinker`" in hint
    assert timed_out.startswith(f"tandem: job {job_id} has not ended after 10 s (state: running)")
    assert run.returncode == exit_codes.JOB_FAILED, out + err
