"""A worker whose queue RabbitMQ made with other arguments (a quorum queue, a worker set to
``classic``; or the other way round) stops at once with one line naming the queue and what to do,
exit status 2, and leaves the queue as it was. Before, Celery reconnected in a loop on
``PRECONDITION_FAILED`` until ``RestartFreqExceeded`` stopped it, the cause far up its log."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from kombu import Connection, Queue

from tests.integration.conftest import _exclusive_db
from tests.integration.rabbitmq import queues

pytestmark = pytest.mark.integration


def _made(vhost_url: str, name: str, arguments: dict[str, object]) -> None:
    with Connection(vhost_url) as connection:
        Queue(name, queue_arguments=arguments)(connection.default_channel).declare()


@pytest.mark.parametrize(
    ("made", "ours", "kind"),
    [({"x-queue-type": "quorum"}, "classic", "quorum"), ({}, "quorum", "classic")],
)
def test_a_worker_whose_queue_was_made_otherwise_says_so_in_one_line(
    vhost_url: str, redis_base: str, made: dict[str, object], ours: str, kind: str
) -> None:
    _made(vhost_url, "thinker", made)
    vhost = vhost_url.rsplit("/", 1)[1]
    with _exclusive_db() as db:
        env = {
            **os.environ,
            "TANDEM_BROKER_URL": vhost_url,
            "TANDEM_REDIS_URL": f"{redis_base}/{db}",
            "TANDEM_RESULT_BACKEND": f"{redis_base}/{db}",
            "TANDEM_RABBITMQ_QUEUE_TYPE": ours,
        }
        done = subprocess.run(
            [sys.executable, "-m", "tandem.workers.cli", "worker", "thinker", "--no-intake"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    said = lines[0]
    assert said.startswith("tandem: RabbitMQ refuses the 'thinker' queue") and "PRECONDITION_FAILED" in said
    assert f"TANDEM_RABBITMQ_QUEUE_TYPE={ours}" in said and f"The queue is a {kind} queue" in said
    assert f"rabbitmqctl delete_queue thinker -p {vhost}" in said
    assert queues(vhost_url, "type")["thinker"] == [kind]  # the queue is as it was
