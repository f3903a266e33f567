"""The Redis broker transport of tandem's workers: kombu's, without the "unacked" copy for step queues.

kombu's Redis transport emulates acknowledgements: every message a worker takes is written to an
``unacked`` hash and index (``MULTI ZADD HSET EXEC``) and removed again when the task is
acknowledged (``MULTI ZREM HDEL EXEC``), so that a message held by a worker that died comes back
after the visibility timeout. That is 8 Redis commands and 2 Redis client objects per message.

A step message (queues ``thinker``, ``actor``, ``tools``) needs none of it: the job's record
says which step is current, and the reconciler (``tandem.tasks.state.reconciler``) sends a step again
when no worker claimed it in time, whatever happened to its message (and sooner than the
visibility timeout would). So ``Channel`` keeps the messages of the queues named in the transport
option ``resent_queues`` in the worker's memory only, still counted against the prefetch limit and
put back in their queue when the worker shuts down (or a task is rejected with ``requeue``).
Messages of every other queue (the intake queue: ``tandem.infer`` sent by a bare client,
``tandem.decide``, ``tandem.resume``, ``tandem.fork``) keep kombu's ack emulation. The channel also
keeps one Redis client instead of making one per command, and takes the messages of those queues
in batches: after a BRPOP, as many more as the prefetch limit allows (at most the transport
option ``batch_fetch``) in one ``RPOP`` with a count (paused while such ``RPOP``s find nothing).
With intake lanes (``TANDEM_INTAKE_LANES``, transport option ``rotated_queues``) it takes the
intake queue and its lanes in turn, one message each (``tandem.broker_config.intake_lanes``).

The channel also survives what kombu's does not:

- **A lost connection** (Redis restarted, or unreachable). kombu closes the channel after it has
  released the connection, then tries to put the messages it holds back in their queues through
  it, and raises ``AttributeError`` from deep inside its connection parameters: the worker exits.
  Here a channel whose connection is gone raises a connection error instead (which Celery's
  reconnect loop handles), and the messages it held are dropped from memory: step messages are
  sent again by the reconciler, and intake messages keep their "unacked" copy in Redis, which
  kombu restores after the visibility timeout.
- **A message that says it came from elsewhere.** On Redis a message's ``delivery_info`` (its
  exchange and routing key) is written by whoever pushed it, not by the broker. The channel writes
  the list it really took the message from into ``delivery_info[QUEUE_STAMP]``, over anything the
  sender put there, so that the worker's consumer knows a step message pushed onto the intake queue
  for what it is (``tandem.broker_config.consumer.misplaced_step``).
- **A malformed message** (not JSON, not a kombu envelope, a body it cannot decode). kombu's
  ``loads`` would raise into the worker's event loop and end the worker; here the message is
  logged, kept in a capped dead-letter list (transport option ``dead_letter_key``, when set) and
  dropped, and the listeners of ``tandem.broker_config.dropped`` are told (with its headers, when
  the envelope has readable ones: the caller of a public task is answered).

Celery uses this transport for every ``redis://`` and ``rediss://`` broker (``broker_transport``
names ``Transport``; see ``tandem.broker_config.celery_config``), and ``SentinelTransport``, the same
channel over kombu's Sentinel channel, for a ``redis+sentinel://`` one (``tandem.broker_config.sentinel``).
"""

from __future__ import annotations

import json
import logging
import time
from queue import Empty
from typing import Any

from kombu.transport import redis, virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads
from redis.exceptions import ConnectionError as RedisConnectionError

from tandem.broker_config import capture, dropped
from tandem.broker_config.intake_lanes import LaneCycle

log = logging.getLogger("tandem.broker")

DEAD_LETTERS_KEPT = 1000
"""How many malformed messages the dead-letter list keeps (the newest)."""
DEAD_LETTER_TTL = 7 * 86400
"""How long the dead-letter list lives after its last entry (seconds)."""
QUEUE_STAMP = "tandem_queue"
"""The ``delivery_info`` key where the channel writes the queue it took a message from."""
DEAD_LETTER_EXCERPT = 4096
"""How much of a malformed message is kept (bytes of its UTF-8 text)."""


def dead_letter_entry(text: str, queue: str, reason: str) -> bytes:
    """The dead-letter list's entry for a malformed message: JSON of its queue, the reason, the
    time and the message's first ``DEAD_LETTER_EXCERPT`` bytes (UTF-8, never cut inside a
    character), at most ``DEAD_LETTER_EXCERPT`` + 512 bytes in all whatever the text holds."""
    excerpt = text.encode("utf-8", "replace")[:DEAD_LETTER_EXCERPT].decode("utf-8", "ignore")
    reason = reason[:256]
    while True:
        entry = {"queue": queue[:128], "reason": reason, "at": time.time(), "message": excerpt}
        encoded = json.dumps(entry, ensure_ascii=False).encode("utf-8")
        if len(encoded) <= DEAD_LETTER_EXCERPT + 512 or not excerpt:
            return encoded
        excerpt = excerpt[: len(excerpt) // 2]  # escapes (control characters) made it longer


def headers_of(raw: Any) -> dict[str, Any]:
    """The headers of a message as it lies in a Redis list, as far as they can be read (``{}``)."""
    try:
        payload = loads(bytes_to_str(raw)) if isinstance(raw, bytes | str) else raw
    except Exception:
        return {}
    headers = payload.get("headers") if isinstance(payload, dict) else None
    return headers if isinstance(headers, dict) else {}


class MalformedMessage(ValueError):
    """A broker message that is not a kombu envelope tandem's workers can take."""


def envelope(raw: Any) -> dict[str, Any]:
    """The kombu envelope in ``raw`` (a message as it lies in a Redis list), or
    ``MalformedMessage`` saying what is wrong with it (see ``check_envelope``)."""
    try:
        payload = loads(bytes_to_str(raw))
    except (TypeError, ValueError) as exc:
        raise MalformedMessage(f"not JSON ({exc})") from None
    return check_envelope(payload)


def check_envelope(payload: Any) -> dict[str, Any]:
    """``payload`` if it is a kombu envelope, else ``MalformedMessage``.

    Checks what kombu reads before Celery sees the message: an object whose ``properties`` is an
    object with a ``delivery_tag`` and a ``delivery_info`` naming the exchange and routing key, a
    string body in an encoding
    kombu knows, and ``headers`` an object if any. What Celery reads next (the task name, the
    arguments) it checks itself: such a message is rejected by Celery and logged, and the worker
    goes on."""
    if not isinstance(payload, dict):
        raise MalformedMessage(f"a JSON {type(payload).__name__}, not an object")
    props = payload.get("properties")
    if not isinstance(props, dict):
        raise MalformedMessage("no 'properties' object")
    if not isinstance(props.get("delivery_tag"), str | int):
        raise MalformedMessage("no 'properties.delivery_tag'")
    info = props.get("delivery_info")
    if not (
        isinstance(info, dict)
        and isinstance(info.get("exchange"), str)
        and isinstance(info.get("routing_key"), str)
    ):
        # kombu writes both when it publishes, and reads both when it keeps or restores a message
        # (a ``KeyError`` there reads as a lost connection to Celery).
        raise MalformedMessage("no 'properties.delivery_info' with 'exchange' and 'routing_key'")
    if props.get("body_encoding") not in (None, "base64", "utf-8"):
        raise MalformedMessage(f"body encoding {props.get('body_encoding')!r} is not one kombu knows")
    if not isinstance(payload.get("body", ""), str | None):
        raise MalformedMessage("the body is not a string")
    if not isinstance(payload.get("headers", {}), dict | None):
        raise MalformedMessage("'headers' is not an object")
    return payload


def stamp(payload: dict[str, Any], queue: str) -> None:
    """Write ``queue``, the list the envelope ``payload`` was taken from, into its
    ``delivery_info`` (``QUEUE_STAMP``), replacing whatever the sender wrote there."""
    payload["properties"]["delivery_info"][QUEUE_STAMP] = queue


def unstamped(payload: Any) -> Any:
    """``payload`` as its sender wrote it: a copy without the ``QUEUE_STAMP`` the channel wrote
    (what a dead letter keeps); anything else as it is."""
    props = payload.get("properties") if isinstance(payload, dict) else None
    info = props.get("delivery_info") if isinstance(props, dict) else None
    if not isinstance(props, dict) or not isinstance(info, dict) or QUEUE_STAMP not in info:
        return payload
    info = {k: v for k, v in info.items() if k != QUEUE_STAMP}
    return {**payload, "properties": {**props, "delivery_info": info}}


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
        if (message.delivery_info or {}).get("routing_key") in self.channel.resent_queues:
            self._in_memory.add(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)
        else:
            super().append(message, delivery_tag)

    def ack(self, delivery_tag: Any) -> None:
        """Forget an acknowledged message. A message taken on a connection that was lost since is
        not acknowledged (a step message is gone already; an intake message's "unacked" copy comes
        back after the visibility timeout and finds its job started: it does nothing)."""
        if delivery_tag in self._in_memory:
            self._in_memory.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)
        elif self.channel.closed:
            log.info("message %s was taken on a broker connection lost since: not acknowledged", delivery_tag)
        else:
            super().ack(delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        """Forget a rejected message, putting it back at the head of its queue with ``requeue``
        (not for a message taken on a connection lost since: see ``ack``)."""
        if self.channel.closed:
            self._in_memory.discard(delivery_tag)
            log.info("message %s was taken on a broker connection lost since: not rejected", delivery_tag)
        elif delivery_tag in self._in_memory:
            virtual.QoS.reject(self, delivery_tag, requeue)  # requeue: ``Channel._restore``
            self._in_memory.discard(delivery_tag)
        else:
            super().reject(delivery_tag, requeue)

    def restore_unacked(self, client: Any = None) -> None:
        """Put every message still held back in its queue (at shutdown, or when the connection
        was lost). Never raises: where Redis cannot be reached the step messages are dropped (the
        reconciler sends their steps again) and the intake messages stay in kombu's "unacked"
        copy, restored after the visibility timeout."""
        self._flush()  # acknowledged messages are not restored
        held = [self._delivered.pop(t) for t in list(self._delivered) if t in self._in_memory]
        # ``_in_memory`` keeps their tags: their steps may still run and acknowledge them (a no-op).
        for done, message in enumerate(held):
            try:
                self.channel._restore(message)
            except Exception:  # the first failure drops the rest: each would wait for a timeout
                log.warning(
                    "the broker connection is gone: %d step message(s) this worker held were "
                    "dropped; the reconciler sends their steps again",
                    len(held) - done,
                )
                break
        try:
            super().restore_unacked(client)
        except Exception as exc:
            log.warning(
                "the broker connection is gone: %d intake message(s) this worker held stay in Redis's "
                "unacked copy and come back after the visibility timeout (%s)",
                len(self._delivered),
                exc,
            )
            self._delivered.clear()


class Channel(redis.Channel):
    """kombu's Redis channel with ``QoS`` above; ``resent_queues`` is a transport option."""

    QoS = QoS
    resent_queues: frozenset[str] | tuple[str, ...] = ()
    """Queues whose messages tandem sends again by itself when they are lost."""
    batch_fetch: int = 64
    """The most messages of a ``resent_queues`` queue taken in one round trip after a BRPOP
    (transport option; 0: one per BRPOP, as kombu does)."""
    dead_letter_key: str | None = None
    """The Redis list that keeps malformed messages (transport option; ``None``: logged only)."""
    rotated_queues: tuple[str, ...] | list[str] = ()
    """Queues taken in turn (transport option: the intake queue and its lanes, ``LaneCycle``);
    none: kombu's order, fixed."""
    from_transport_options = (  # type: ignore[assignment]
        *redis.Channel.from_transport_options,
        "resent_queues",
        "batch_fetch",
        "dead_letter_key",
        "rotated_queues",
    )

    _client: Any = None
    _fetch_misses = 0
    """``RPOP``s in a row that found nothing (up to 5)."""
    _fetch_pause = 0
    """``BRPOP``s still to go without an ``RPOP`` after them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.rotated_queues:
            self._queue_cycle = LaneCycle(self.rotated_queues, list(self._queue_cycle.items))

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

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        # kombu clears the transport's connection when it gives a lost connection up, and may then
        # still ask this channel for a client (to put the messages it held back in their queues):
        # a connection error here is what every caller of kombu's and Celery's handles.
        if self.connection is None or self.connection.client is None:
            raise RedisConnectionError("the broker connection was closed after it failed")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)
        return params

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        # Inside ``capture.capture()`` the message is kept for a step's commit to push.
        if not capture.take(self, queue, message, kwargs):
            super()._put(queue, message, **kwargs)

    def _deliver_raw(self, raw: Any, queue: str) -> None:
        """Hand one message taken from ``queue`` to its consumer, or dead-letter it if malformed."""
        try:
            payload = envelope(raw)
        except MalformedMessage as exc:
            self.dead_letter(raw, queue, str(exc))
            dropped.tell(headers_of(raw), str(exc))
            return
        stamp(payload, queue)
        self._deliver_checked(payload, queue, raw)

    def _deliver_checked(self, payload: dict[str, Any], queue: str, raw: Any) -> None:
        try:
            self.connection._deliver(payload, queue)
        except tuple(e for e in self.connection_errors if not issubclass(e, LookupError)):
            raise  # a ``KeyError`` is the message's fault (see ``consumer.lost_connection_errors``)
        except Exception as exc:  # kombu could not make a message of it (e.g. a body not base64)
            tag = payload["properties"]["delivery_tag"]
            if tag in self.qos._delivered:
                self.qos.reject(tag, requeue=False)
            self.dead_letter(raw, queue, f"{type(exc).__name__}: {exc}")
            dropped.tell(headers_of(payload), f"{type(exc).__name__}: {exc}")

    def dead_letter(self, raw: Any, queue: str, reason: str) -> None:
        """Log a malformed message and keep an excerpt in the dead-letter list (capped, with a
        TTL); the worker goes on."""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        log.error(
            "dropped a malformed message from queue %r (%s; %d characters, starting %r)%s",
            queue,
            reason,
            len(text),
            text[:80],
            f"; kept in the Redis list {self.dead_letter_key!r}" if self.dead_letter_key else "",
        )
        if not self.dead_letter_key:
            return
        entry = dead_letter_entry(text, queue, reason)
        try:
            with self.conn_or_acquire() as client:
                pipe = client.pipeline(transaction=False)
                pipe.lpush(self.dead_letter_key, entry)
                pipe.ltrim(self.dead_letter_key, 0, DEAD_LETTERS_KEPT - 1)
                pipe.expire(self.dead_letter_key, DEAD_LETTER_TTL)
                pipe.execute()
        except Exception:
            log.warning("could not keep the malformed message in %r", self.dead_letter_key, exc_info=True)

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        # kombu's synchronous path (``basic_get``, draining without the event loop): the same
        # check of every message as the event loop's.
        with self.conn_or_acquire() as client:
            for pri in self.priority_steps:
                key = self._q_for_pri(queue, pri)
                while (item := client.rpop(key)) is not None:
                    try:
                        payload = envelope(item)
                    except MalformedMessage as exc:
                        self.dead_letter(item, queue, str(exc))
                        dropped.tell(headers_of(item), str(exc))
                        continue
                    self._maybe_update_queues_expire(client, queue)
                    stamp(payload, queue)
                    return payload
            self._maybe_update_queues_expire(client, queue)
        raise Empty()

    def _deliver_fanout_message(self, message: Any, exchange: str) -> bool:
        # Broadcasts (Celery's remote control) arrive decoded already; kombu checks their JSON.
        try:
            payload = check_envelope(message)
        except MalformedMessage as exc:
            self.dead_letter(json.dumps(message, default=str), exchange, str(exc))
            return False
        self._deliver_checked(payload, self._fanout_to_queue[exchange], json.dumps(payload))
        return True

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
            self._deliver_raw(item, queue)
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
            self._deliver_raw(item, queue)

    def _restore(self, message: Any, leftmost: bool = False) -> None:
        if not self.ack_emulation or not self.qos.holds_in_memory(message.delivery_tag):
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


class SentinelChannel(Channel, redis.SentinelChannel):
    """``Channel`` above on the master the Sentinels name (kombu's ``SentinelChannel`` finds it at
    every connection, so a channel opened after a failover reaches the new master).

    The Sentinels come from the transport option ``sentinels`` (``[[host, port], ...]``), not from
    Celery's ``;`` list of URLs: kombu treats such a list as alternates and, at a connection error,
    switches to the next one by parsing it again, which puts its own transport for the
    ``sentinel`` scheme in place of this one (``tandem.broker_config.sentinel.SentinelUrl.broker``)."""

    sentinels: tuple[tuple[str, int], ...] | list[list[Any]] = ()
    """Every Sentinel, ``[host, port]`` each (transport option); none: the URL's host."""
    from_transport_options = (  # type: ignore[assignment]
        *Channel.from_transport_options,
        *(o for o in redis.SentinelChannel.from_transport_options if o not in Channel.from_transport_options),
        "sentinels",
    )

    def _sentinel_managed_pool(self, asynchronous: bool = False) -> Any:
        from redis import Redis
        from redis.sentinel import Sentinel

        params = self._connparams(asynchronous)
        host, port = params.pop("host", None), params.pop("port", None)
        nodes = [(str(h), int(p)) for h, p in self.sentinels] or [(str(host), int(port or 26379))]
        manager = Sentinel(
            nodes,
            min_other_sentinels=getattr(self, "min_other_sentinels", 0),
            sentinel_kwargs=getattr(self, "sentinel_kwargs", None),
            **params,
        )
        # kept so that kombu closes the Sentinel connections with the channel's pools
        if asynchronous:
            self._async_sentinel_manager = manager
        else:
            self._sentinel_manager = manager
        master_name = getattr(self, "master_name", None)
        if master_name is None:
            raise ValueError("the transport option 'master_name' (the Sentinels' service) is not set")
        return manager.master_for(master_name, redis_class=Redis).connection_pool


class SentinelTransport(Transport):
    """kombu's Redis transport with ``SentinelChannel`` above (Sentinel's default port)."""

    Channel = SentinelChannel
    default_port = 26379  # type: ignore[assignment]  # (kombu's base declares None)


SENTINEL_TRANSPORT = f"{__name__}:SentinelTransport"
"""The ``broker_transport`` value that selects ``SentinelTransport``."""
