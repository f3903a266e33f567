"""Helpers of the ``test_breaking_*`` tests: a cluster on a redis-server of the test's own (which a
test may restart, crash or pause: never the shared one), waits that ride out an outage, and the
checks of every job of a run (``chaos.check``: the right deliverable, the exact memory, no
``at_most_once`` call twice, the Celery result in the backend).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kombu import Connection
from redis.exceptions import RedisError

from tandem.client.handle import JobHandle
from tests.integration.chaos import PLAN, ChaosStats, OwnRedis, check
from tests.integration.conftest import Cluster, _cluster_on
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]

FAST = {
    "TANDEM_LEASE_SECONDS": "2",
    "TANDEM_STALL_SECONDS": "4",
    "TANDEM_TOOL_TIMEOUT": "30",
    "TANDEM_TOOLKIT": "tests.integration.tools:durable_toolkit",
}
"""Short leases, so the reconciler takes a lost step over within seconds; the durable tools."""

SMALL = {"thinker": 2, "actor": 2, "tools": 4}
"""Worker threads per role: the machine has two shared cores."""


@contextmanager
def own_cluster(
    env: dict[str, str] | None = None, *, appendonly: bool = True
) -> Iterator[tuple[Hosts, OwnRedis]]:
    """A cluster (no workers yet) on database 0 of a redis-server of this test, stopped after.

    The cluster's own teardown runs at the end with Redis up (resumed if the test paused it): it
    fails when a worker exited by itself or a ``tandem:`` key has no TTL.
    """
    server = OwnRedis(appendonly=appendonly).start()
    clusters = _cluster_on(f"{server.base}/0", **(env or {}))
    try:
        hosts = next(clusters)
        try:
            yield hosts, server
        except BaseException:
            server.resume()
            try:
                next(clusters, None)
            except BaseException as teardown:  # the test's own failure is the one to see
                print(f"cluster teardown after a failure: {teardown!r}", file=sys.stderr)
            raise
        server.resume()
        next(clusters, None)
    finally:
        server.stop()


def poll(what: Callable[[], Any], timeout: float, message: str, every: float = 0.1) -> Any:
    """``what()`` once it is truthy; Redis errors (an outage the test made) count as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = what()
        except (RedisError, OSError):
            found = None
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {message}")


def plan_jobs(cluster: Cluster, count: int, label: str, plan: Any = PLAN) -> list[JobHandle]:
    """``count`` dual jobs following ``plan`` (by default the chaos plan: three rounds of tools,
    one ``charge_card`` at most once, then the deliverable)."""
    return [cluster.submit(goal=goal_with_plan(f"{label} {i}", plan), max_rounds=8) for i in range(count)]


class WorkerExited(AssertionError):
    """A worker of the cluster exited by itself."""


def ended(cluster: Cluster, handles: list[JobHandle], timeout: float) -> None:
    """Wait until every job has its result in the store (through outages)."""

    def all_ended() -> bool:
        gone = cluster.exited()
        if gone:  # no job can end without its role's only worker: fail now, not at the timeout
            raise WorkerExited(f"workers exited by themselves: {gone}")
        return all(cluster.store.result(h.id) is not None for h in handles)

    try:
        poll(all_ended, timeout, "every job to end", every=0.25)
    except WorkerExited:
        raise
    except AssertionError:
        late = {
            h.id: cluster.store.machine.record(h.id) for h in handles if cluster.store.result(h.id) is None
        }
        raise AssertionError(f"jobs not ended after {timeout:g} s: {late}") from None


def checked(cluster: Cluster, handles: list[JobHandle]) -> ChaosStats:
    """Every job completed with the chaos plan's deliverable and exact memory, no charge twice,
    its Celery result in the backend, no key without a TTL."""
    stats = ChaosStats(jobs=len(handles))
    check(cluster, handles, stats)
    assert stats.failures == [], stats.failures
    assert (stats.completed, stats.stuck, stats.lost_celery_results) == (len(handles), 0, 0)
    assert stats.keys_without_ttl == []
    return stats


def charges(cluster: Cluster) -> list[dict[str, Any]]:
    """The ``charge_card`` runs recorded so far."""
    return [c for c in cluster.tool_calls() if c["name"] == "charge_card"]


def logs(cluster: Cluster, *needles: str) -> list[str]:
    """The worker log lines holding any of ``needles`` (for failure messages)."""
    found = []
    for group in cluster.groups:
        for role in group.roles:
            try:
                text = (group.log_dir / f"{role}.log").read_text(errors="replace")
            except OSError:
                continue
            found += [f"{role}: {line}" for line in text.splitlines() if any(n in line for n in needles)]
    return found


class CutLink:
    """A TCP proxy on ``127.0.0.1`` (``port``) to ``target`` that a test can cut.

    ``cut()`` resets the client side of every connection (the worker sees ``Connection reset``
    at once) and refuses new connections until ``mend()``. With ``silent_server=True`` the server
    side of each cut connection is kept open and hears nothing more, as when a network cut or a
    client host's network going away leaves the broker unaware until its heartbeat times out;
    otherwise it is reset too (the broker drops the connection at once).
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._held: list[socket.socket] = []
        self._silenced: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()
        self._stopping = threading.Event()

    def start(self) -> CutLink:
        threading.Thread(target=self._accept, name="cut-link", daemon=True).start()
        return self

    @staticmethod
    def _reset(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked on it (a close would not)
        with contextlib.suppress(OSError):
            sock.close()

    def cut(self, *, silent_server: bool = False) -> None:
        """Reset every connection's client side (and server side unless ``silent_server``);
        refuse new connections until ``mend``."""
        self._open.clear()
        with self._lock:
            pairs, self._pairs = self._pairs, []
            if silent_server:
                self._silenced.update(server for _, server in pairs)
                self._held += [server for _, server in pairs]
        for client, server in pairs:
            self._reset(client)
            if not silent_server:
                self._reset(server)

    def mend(self) -> None:
        """Accept connections again (held server sides stay silent until ``stop``)."""
        self._open.set()

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()
        with self._lock:
            held, self._held = self._held, []
        for sock in held:
            self._reset(sock)

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                self._reset(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            if src in self._silenced or dst in self._silenced:
                continue  # a held server side: read and drop what it sends, say nothing
            try:
                dst.sendall(data)
            except OSError:
                break
        for sock in (src, dst):
            if sock not in self._silenced:
                self._reset(sock)


def rabbitmq_answers() -> bool:
    """Whether a RabbitMQ answers on 127.0.0.1:5672."""
    try:
        with Connection("amqp://guest:guest@127.0.0.1:5672//", connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1)
        return True
    except Exception:
        return False


@contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """The AMQP URL of a RabbitMQ virtual host of this test (its queues are nobody else's),
    deleted after; the test is skipped when no RabbitMQ answers or no vhost can be made."""
    if not rabbitmq_answers():
        pytest.skip("no RabbitMQ answers at 127.0.0.1:5672")
    name = f"tandem-breaking-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run(["rabbitmqctl", "add_vhost", name], check=True, capture_output=True, timeout=60)
        subprocess.run(
            ["rabbitmqctl", "set_permissions", "-p", name, "guest", ".*", ".*", ".*"],
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot make a RabbitMQ virtual host: {exc}")
    try:
        yield f"amqp://guest:guest@127.0.0.1:5672/{name}"
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", name], capture_output=True, timeout=60)


def jobs_with_charges(cluster: Any, count: int) -> bool:
    """Whether at least ``count`` jobs have run ``charge_card`` (their first tool round)."""
    return len({c["job"] for c in charges(cluster)}) >= count


def each_event_once(cluster: Any, job_id: str) -> list[str]:
    """What the job's stream holds more than once: a model reply per round and role, a tool call
    per round, index and attempt, a tool result per round and index, the ``final`` event."""
    seen: dict[tuple[Any, ...], int] = {}
    for e in cluster.store.read_events(job_id, count=100_000):
        if e.type == "model_reply":
            key: tuple[Any, ...] = (e.type, e.round, e.role)
        elif e.type == "tool_call":  # once per attempt: a run cut off is announced again
            key = (e.type, e.round, e.index, e.attempt)
        elif e.type == "tool_result":
            key = (e.type, e.round, e.index)
        elif e.type == "final":
            key = (e.type,)
        else:
            continue
        seen[key] = seen.get(key, 0) + 1
    twice = [f"{job_id}: {key} x{n}" for key, n in seen.items() if n != 1]
    return twice + ([] if ("final",) in seen else [f"{job_id}: no final event"])
