"""The Redis broker transport of tandem's workers: kombu's, without the "unacked" copy for step queues.

kombu's Redis transport emulates acknowledgements: every message a worker takes is written to an
``unacked`` hash and index (``MULTI ZADD HSET EXEC``) and removed again when the task is
acknowledged (``MULTI ZREM HDEL EXEC``), so that a message held by a worker that died comes back
after the visibility timeout. That is 8 Redis commands and 2 Redis client objects per message.

A step message (queues ``thinker``, ``actor``, ``tools``) needs none of it: the job's record
says which step is current, and the reconciler (``tandem.tasks.reconciler``) sends a step again
when no worker claimed it in time, whatever happened to its message (and sooner than the
visibility timeout would). So ``Channel`` keeps the messages of the queues named in the transport
option ``resent_queues`` in the worker's memory only, still counted against the prefetch limit and
put back in their queue when the worker shuts down (or a task is rejected with ``requeue``).
Messages of every other queue (the intake queue: ``tandem.infer`` sent by a bare client,
``tandem.decide``, ``tandem.resume``, ``tandem.fork``) keep kombu's ack emulation. The channel also
keeps one Redis client instead of making one per command, and takes the messages of those queues
in batches: after a BRPOP, as many more as the prefetch limit allows (at most the transport
option ``batch_fetch``) in one ``RPOP`` with a count (paused while such ``RPOP``s find nothing).

Celery uses this transport when ``broker_transport`` names ``Transport`` (see
``tandem.broker_config.celery_config``).
"""

from __future__ import annotations

from queue import Empty
from typing import Any

from kombu.transport import redis, virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads


class QoS(redis.QoS):
    """kombu's Redis ack emulation, skipped for the messages of the channel's ``resent_queues``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_memory: set[Any] = set()

    def holds_in_memory(self, delivery_tag: Any) -> bool:
        """Whether the message of ``delivery_tag`` is held in memory only (no ``unacked`` copy)."""
        return delivery_tag in self._in_memory

    def append(self, message: Any, delivery_tag: Any) -> None:
        """Track a message a consumer took (in Redis too, unless its queue is re-sent by tandem)."""
        if message.delivery_info.get("routing_key") in self.channel.resent_queues:
            self._in_memory.add(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)
        else:
            super().append(message, delivery_tag)

    def ack(self, delivery_tag: Any) -> None:
        """Forget an acknowledged message."""
        if delivery_tag in self._in_memory:
            self._in_memory.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)
        else:
            super().ack(delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        """Forget a rejected message, putting it back at the head of its queue with ``requeue``."""
        if delivery_tag in self._in_memory:
            virtual.QoS.reject(self, delivery_tag, requeue)  # requeue: ``Channel._restore``
            self._in_memory.discard(delivery_tag)
        else:
            super().reject(delivery_tag, requeue)

    def restore_unacked(self, client: Any = None) -> None:
        """Put every message still held back in its queue (at shutdown)."""
        self._flush()  # acknowledged messages are not restored
        for tag in [t for t in self._delivered if t in self._in_memory]:
            self.channel._restore(self._delivered.pop(tag))
        self._in_memory.clear()
        super().restore_unacked(client)


class Channel(redis.Channel):
    """kombu's Redis channel with ``QoS`` above; ``resent_queues`` is a transport option."""

    QoS = QoS
    resent_queues: frozenset[str] | tuple[str, ...] = ()
    """Queues whose messages tandem sends again by itself when they are lost."""
    batch_fetch: int = 64
    """The most messages of a ``resent_queues`` queue taken in one round trip after a BRPOP
    (transport option; 0: one per BRPOP, as kombu does)."""
    from_transport_options = (  # type: ignore[assignment]
        *redis.Channel.from_transport_options,
        "resent_queues",
        "batch_fetch",
    )

    _client: Any = None
    _fetch_misses = 0
    """``RPOP``s in a row that found nothing (up to 5)."""
    _fetch_pause = 0
    """``BRPOP``s still to go without an ``RPOP`` after them."""

    def _create_client(self, asynchronous: bool = False) -> Any:
        # kombu makes a new redis-py client for every command it sends (a publish, a restore),
        # and redis-py builds its table of reply callbacks for each one: about as much CPU as the
        # command itself. A client is thread-safe (each command takes a connection from the
        # pool), so one serves the channel for as long as its pool lives.
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self._client
        if client is None or client.connection_pool is not self.pool:
            client = self._client = super()._create_client()
        return client

    def _brpop_read(self, **options: Any) -> bool:
        # kombu takes one message per BRPOP. At the end of a wave of model calls hundreds of
        # threads free up at once, and the worker's event loop would fetch their next messages
        # one round trip (and one wait for the GIL) at a time. So after the message BRPOP
        # brought, as many more as the prefetch limit allows come from the same list in one RPOP.
        try:
            try:
                reply = self.client.parse_response(self.client.connection, "BRPOP", **options)
            except self.connection_errors:
                self.client.connection.disconnect()  # the next BRPOP reconnects
                raise
            if not reply:
                raise Empty()
            key, item = bytes_to_str(reply[0]), reply[1]
            queue = key.rsplit(self.sep, 1)[0]
            self._queue_cycle.rotate(queue)
            self.connection._deliver(loads(bytes_to_str(item)), queue)
        finally:
            self._in_poll = None  # type: ignore[assignment]
            flush = getattr(self, "_flush_brpop_reauth", None)  # kombu >= 5.7: a pending re-auth
            if flush is not None:
                flush()
        if queue in self.resent_queues and self.batch_fetch:
            self._fetch_more(key, queue)
        return True

    def _fetch_more(self, key: str, queue: str) -> None:
        """Deliver up to the prefetch room's worth of messages more from list ``key``.

        An ``RPOP`` that finds the list empty is a command for nothing (a quiet queue, where each
        ``BRPOP`` waits for its message): after one, the next 1, 3, 7, 15, then 31 ``BRPOP``s go
        without it, and the first ``RPOP`` that finds messages again ends the pause."""
        if self._fetch_pause > 0:
            self._fetch_pause -= 1
            return
        room = min(self.qos.can_consume_max_estimate() or 0, self.batch_fetch)
        if room <= 0:
            return
        try:
            with self.conn_or_acquire() as client:
                items = client.rpop(key, room)
        except self.ResponseError:  # Redis before 6.2 (no RPOP count): one message per BRPOP
            self.batch_fetch = 0
            return
        if not items:
            self._fetch_misses = min(self._fetch_misses + 1, 5)
            self._fetch_pause = 2**self._fetch_misses - 1
            return
        self._fetch_misses = 0
        for item in items:
            self.connection._deliver(loads(bytes_to_str(item)), queue)

    def _restore(self, message: Any, leftmost: bool = False) -> None:
        if not self.qos.holds_in_memory(message.delivery_tag):
            super()._restore(message, leftmost)
            return
        info = message.delivery_info
        with self.conn_or_acquire() as client:
            self._do_restore_message(message._raw, info["exchange"], info["routing_key"], client, leftmost)


class Transport(redis.Transport):
    """kombu's Redis transport with ``Channel`` above."""

    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
"""The ``broker_transport`` value that selects this transport."""
