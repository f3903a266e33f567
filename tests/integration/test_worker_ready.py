"""``WorkerGroup.wait_ready`` waits for the workers' own ready signal (``tandem worker
--ready-file``: written once the worker takes work), then a ping, never for a fixed time: a worker
paused before it is ready (as a loaded machine pauses it) is waited for and found ready as soon as
it goes on; a wait that does run out names the worker, what it was waiting for and how busy the
machine was; a worker that exits fails the wait at once."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from tandem.workers.embedded import WorkerGroup
from tandem.workers.errors import RuntimeStartError
from tests.integration.conftest import READY_SECONDS, Cluster
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]


@pytest.fixture
def group(fresh_cluster: Hosts) -> Iterator[tuple[Cluster, WorkerGroup]]:
    """A tools worker of the cluster, started but not waited for; stopped (and resumed) after."""
    cluster, _, _ = fresh_cluster
    group = WorkerGroup(("tools",), env=cluster.env, loglevel="INFO", name="ready").start()
    try:
        yield cluster, group
    finally:
        proc = group.processes["tools"]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
        group.stop()


def test_a_worker_paused_before_it_is_ready_is_waited_for_and_found_when_it_goes_on(
    group: tuple[Cluster, WorkerGroup],
) -> None:
    cluster, workers = group
    proc = workers.processes["tools"]
    os.kill(proc.pid, signal.SIGSTOP)  # still importing: it cannot say it is ready
    with pytest.raises(RuntimeStartError) as failed:
        workers.wait_ready(cluster.app, timeout=2)
    message = str(failed.value)
    assert message.startswith("workers not ready after 2 s (load average ")
    assert f"- the tools worker (pid {proc.pid}, still running) had not said it was ready" in message
    assert not workers.ready_file("tools").exists()

    os.kill(proc.pid, signal.SIGCONT)
    workers.wait_ready(cluster.app, timeout=READY_SECONDS)

    pid, node = workers.ready_file("tools").read_text().split()
    assert int(pid) == proc.pid and node.startswith("tools-ready@")
    assert cluster.app.control.ping(destination=[node], limit=1, timeout=READY_SECONDS) == [
        {node: {"ok": "pong"}}
    ]  # ready means taking work: it answers at once


def test_a_worker_that_said_it_was_ready_but_answers_no_ping_is_named(
    group: tuple[Cluster, WorkerGroup],
) -> None:
    cluster, workers = group
    deadline = time.monotonic() + READY_SECONDS
    while not workers.ready_file("tools").exists():  # its own signal; the ping comes next
        assert time.monotonic() < deadline, "the tools worker never wrote its ready file"
        assert workers.processes["tools"].poll() is None, "the tools worker exited"
        time.sleep(0.05)
    os.kill(workers.processes["tools"].pid, signal.SIGSTOP)
    with pytest.raises(RuntimeStartError, match=r"the tools worker .* said it was ready but answered no"):
        workers.wait_ready(cluster.app, timeout=3)


def test_a_worker_that_exits_fails_the_wait_at_once_with_its_log(fresh_cluster: Hosts) -> None:
    cluster, _, _ = fresh_cluster
    workers = WorkerGroup(
        ("tools",), env={**cluster.env, "TANDEM_TOOLKIT": "no.such.module:toolkit"}, name="broken"
    ).start()
    try:
        with pytest.raises(RuntimeStartError) as failed:
            workers.wait_ready(cluster.app, timeout=READY_SECONDS)
        message = str(failed.value)  # not "not ready after": it did not wait for the deadline
        assert "the tools worker (pid " in message and ") exited with code 2 before it was ready" in message
        assert "no.such.module" in message  # the end of its log says why
    finally:
        workers.stop()
