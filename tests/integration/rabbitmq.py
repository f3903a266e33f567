"""A RabbitMQ virtual host per test on the local node (made with ``rabbitmqctl``, deleted after), so
each test's queues are new. Tests using ``vhost_url`` skip where no RabbitMQ answers on
127.0.0.1:5672 (with ``rabbitmqctl`` on the path)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator

import pytest


def rabbitmq_answers() -> bool:
    """True when something listens on RabbitMQ's port on this machine."""
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=2):
            return True
    except OSError:
        return False


def ctl(*args: str) -> str:
    """Run ``rabbitmqctl`` with ``args``; its output."""
    done = subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, text=True, timeout=60)
    return done.stdout


def queues(vhost_url: str, *columns: str) -> dict[str, list[str]]:
    """``rabbitmqctl list_queues`` of the test's virtual host: each queue's ``columns``."""
    vhost = vhost_url.rsplit("/", 1)[1]
    out = ctl("list_queues", "-q", "--no-table-headers", "-p", vhost, "name", *columns)
    rows = [line.split("\t") for line in out.splitlines() if line.strip()]
    return {row[0]: row[1:] for row in rows}


@pytest.fixture
def vhost_url() -> Iterator[str]:
    """The AMQP URL of a new virtual host, deleted after the test."""
    if not rabbitmq_answers() or shutil.which("rabbitmqctl") is None:
        pytest.skip("no RabbitMQ (with rabbitmqctl) on 127.0.0.1:5672")
    vhost = f"tandem-test-{uuid.uuid4().hex[:8]}"
    ctl("add_vhost", vhost)
    try:
        ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        ctl("delete_vhost", vhost)
