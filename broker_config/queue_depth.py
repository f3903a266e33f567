"""How many messages wait in each of tandem's queues, read from the broker whatever it is.

The metric ``tandem_queue_depth{queue}`` (``tandem.tasks.metrics``) and an autoscaler built on it
(docs/kubernetes.md) need one number per queue: the messages no worker has taken yet.

- **Redis** (one, or the master Sentinels name). kombu keeps each queue as ten lists, one per
  priority level (tandem's ``priority_steps`` are 0-9): ``<queue>`` for level 0 and
  ``<queue>\\x06\\x16<n>`` for level n. The depth of a queue is the sum of their lengths, read for
  every queue in one pipelined round trip (40 ``LLEN``, and 10 more per intake lane: the intake
  queue's depth counts its lanes', ``TANDEM_INTAKE_LANES``). Messages a worker holds are in none
  of these lists.
- **RabbitMQ.** A passive ``queue.declare`` answers with the queue's ready messages (not those
  delivered and unacknowledged); one per queue, on a connection kept open between reads. A queue
  not declared yet holds nothing: its depth is 0.

A reader raises when the broker cannot be read; the metrics collector reports nothing then
rather than a wrong zero.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import parse_qs

from tandem.broker_config.celery_config import ROLE_QUEUES
from tandem.broker_config.intake_lanes import IntakeLanes
from tandem.broker_config.sentinel import SentinelUrl, is_sentinel_url
from tandem.broker_config.sentinel_clients import sentinel_client
from tandem.broker_config.settings import Settings

PRIORITY_SEPARATOR = "\x06\x16"
"""kombu's separator between a Redis queue's name and its priority level."""
PRIORITY_LEVELS = range(10)
"""The priority levels of tandem's Redis queues (``broker_transport_options.priority_steps``)."""
READ_TIMEOUT = 5.0
"""The longest a read may wait for the broker, in seconds: a scrape must not hang."""
NOT_FOUND = 404
"""AMQP's reply code for a queue that does not exist."""


class QueueDepths(Protocol):
    """Reads the depth of tandem's queues: ``{queue name: messages waiting}``."""

    queues: tuple[str, ...]

    def read(self) -> dict[str, int]:
        """The depth of every queue in ``queues``; raises when the broker cannot be read."""
        ...


def redis_keys(queue: str) -> list[str]:
    """The Redis lists kombu keeps for ``queue``, one per priority level."""
    return [queue if level == 0 else f"{queue}{PRIORITY_SEPARATOR}{level}" for level in PRIORITY_LEVELS]


class RedisQueueDepths:
    """Queue depths on a Redis broker: the lengths of each queue's priority lists, summed.
    ``parts`` lists the further queues counted in a queue's depth (an intake queue's lanes)."""

    def __init__(
        self, client: Any, queues: Sequence[str], parts: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        self.client = client
        self.queues = tuple(queues)
        self.parts = {queue: tuple((parts or {}).get(queue, ())) for queue in self.queues}

    def read(self) -> dict[str, int]:
        """One pipelined round trip of ``LLEN`` for every list of every queue (and of its parts)."""
        pipe = self.client.pipeline(transaction=False)
        counted = [(queue, part) for queue in self.queues for part in (queue, *self.parts[queue])]
        for _queue, part in counted:
            for key in redis_keys(part):
                pipe.llen(key)
        lengths = pipe.execute()
        n = len(PRIORITY_LEVELS)
        depths = dict.fromkeys(self.queues, 0)
        for i, (queue, _part) in enumerate(counted):
            depths[queue] += sum(lengths[i * n : (i + 1) * n])
        return depths


class AmqpQueueDepths:
    """Queue depths on RabbitMQ: the ready messages a passive ``queue.declare`` reports (``parts``
    as for ``RedisQueueDepths``)."""

    def __init__(
        self,
        url: str,
        queues: Sequence[str],
        timeout: float = READ_TIMEOUT,
        parts: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.url = url
        self.queues = tuple(queues)
        self.parts = {queue: tuple((parts or {}).get(queue, ())) for queue in self.queues}
        self.timeout = timeout
        self._connection: Any = None
        self._channel: Any = None
        self._lock = threading.Lock()  # scrapes may come at once; one channel serves them in turn

    def read(self) -> dict[str, int]:
        """One passive declare per queue. A connection kept from an earlier read that fails (closed
        by the broker or a proxy while idle) is replaced once at once; a new one that fails raises."""
        with self._lock:
            while True:
                kept = self._connection is not None
                try:
                    return self._declare_each()
                except Exception:
                    self.close()
                    if not kept:
                        raise

    def _declare_each(self) -> dict[str, int]:
        depths = dict.fromkeys(self.queues, 0)
        for queue in self.queues:
            for part in (queue, *self.parts[queue]):
                channel = self._open()
                try:
                    _, messages, _ = channel.queue_declare(part, passive=True)
                except self._connection.channel_errors as exc:
                    if getattr(exc, "code", None) != NOT_FOUND:
                        raise
                    self._channel, messages = None, 0  # RabbitMQ closed the channel: open another
                depths[queue] += int(messages)
        return depths

    def _open(self) -> Any:
        """The channel of the reads, connecting first when there is none."""
        from kombu import Connection

        if self._connection is None:
            self._connection = Connection(
                self.url,
                connect_timeout=self.timeout,
                transport_options={"read_timeout": self.timeout, "write_timeout": self.timeout},
            )
            self._connection.ensure_connection(max_retries=0)  # no retry: the caller asks again
        if self._channel is None:
            self._channel = self._connection.channel()
        return self._channel

    def close(self) -> None:
        """Close the connection (a later ``read`` opens another)."""
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(Exception):  # the connection is being given up anyway
                connection.release()


def queue_depths(settings: Settings) -> QueueDepths:
    """The reader for ``settings``' broker, over the intake queue and the three role queues; the
    intake queue's depth counts its lanes' messages too (``TANDEM_INTAKE_LANES``)."""
    queues = (settings.intake_queue, *ROLE_QUEUES)
    parts = {settings.intake_queue: IntakeLanes.of(settings).names}
    url = settings.broker_url
    if url.startswith(("amqp://", "pyamqp://")):
        return AmqpQueueDepths(url, queues, parts=parts)
    from redis import Redis

    timeouts: dict[str, Any] = {"socket_timeout": READ_TIMEOUT, "socket_connect_timeout": READ_TIMEOUT}
    if is_sentinel_url(url):  # the master the Sentinels name now
        client = sentinel_client(SentinelUrl.parse(url, "TANDEM_BROKER_URL"), **timeouts)
    elif url.startswith("redis+socket://"):  # kombu's spelling: redis+socket:///path?virtual_host=<db>
        path, _, query = url.removeprefix("redis+socket://").partition("?")
        db = int(parse_qs(query).get("virtual_host", ["0"])[0] or 0)
        client = Redis(unix_socket_path=path, db=db, **timeouts)
    else:
        # What the broker's own connection does for rediss:// (tandem.broker_config.celery_config).
        tls: dict[str, Any] = (
            {"ssl_cert_reqs": "none"} if url.startswith("rediss://") and "ssl_cert_reqs" not in url else {}
        )
        client = Redis.from_url(url, **timeouts, **tls)
    return RedisQueueDepths(client, queues, parts)
