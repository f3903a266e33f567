"""``tandem health`` against the real services: 0 and one line when Redis and the broker answer."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def _health(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tandem.workers.cli", "health", "--timeout", "5"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        cwd="/",
    )


def test_health_answers_on_redis(redis_base: str) -> None:
    done = _health(TANDEM_BROKER_URL=f"{redis_base}/0")
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith("tandem health: ok: Redis (redis://") and "messages waiting: celery " in line


def test_health_answers_on_rabbitmq_quorum_queues(redis_base: str, vhost_url: str) -> None:
    done = _health(
        TANDEM_BROKER_URL=vhost_url, TANDEM_REDIS_URL=f"{redis_base}/0", TANDEM_RABBITMQ_QUEUE_TYPE="quorum"
    )
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert "the broker (amqp://guest:**@127.0.0.1:5672/tandem-test-" in line
    assert "thinker 0, actor 0, tools 0" in line  # no queue declared yet: nothing waits


def test_health_names_a_stopped_broker(redis_base: str) -> None:
    done = _health(TANDEM_BROKER_URL="amqp://guest:guest@127.0.0.1:1//", TANDEM_REDIS_URL=f"{redis_base}/0")
    assert done.returncode == 3 and done.stdout == ""
    assert "the broker (amqp://guest:**@127.0.0.1:1//) failed:" in done.stderr
    assert f"Redis ({redis_base}/0) answered in " in done.stderr
