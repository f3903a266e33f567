"""``WebhookOutbox``: a job's webhook deliveries in Redis, each a durable, idempotent unit.

Failure model. A delivery is written before any POST is tried, and changes only by atomic scripts;
Celery messages (``tandem.webhook``) only wake it up, as they wake a job's steps:

- ``plan`` writes a delivery once (``HSETNX``): its id is derived from the job, the occasion
  (``final:<run>``, ``pause:<seq>``) and the webhook's place in the spec, so the step that parked or
  ended the job and the sweeper that noticed it later write the same delivery, never two;
- ``claim`` takes a pending delivery whose next attempt is due and that no live attempt holds; it
  counts the attempt and holds the delivery for a lease (longer than one POST may take). A second
  message for it finds it held (``busy``), not due (``early``), or settled, and does nothing;
- ``report`` settles the attempt (``delivered``, ``failed``) or sets when the next is due (``retry``);
  only the attempt that holds the delivery may (a later one fenced a slow one off);
- a worker killed mid-POST leaves the delivery held until its lease runs out; the sweeper then
  sends it again (the receiver may get that attempt twice: it de-duplicates by ``Tandem-Delivery``).

Keys: ``{prefix}:{<job>}:webhooks`` (a hash: ``<id>`` the delivery as JSON, ``<id>:state``
``pending|delivered|failed``, ``<id>:attempt``, ``<id>:due``, ``<id>:lease``; TTL from its first
write) and the index the sweeper reads, ``{prefix}:webhooks:<shard>`` (sorted sets of job ids by
when each next needs a look, with a TTL), sharded like the live-job index.
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from redis import Redis

from tandem.reasoner.ttl_writes import zadd_with_ttl
from tandem.tasks.state.keys import LIVE_SHARDS, job_key, webhook_shard_key
from tandem.tasks.state.scripts import lua

_DELIVERY_IDS = uuid.UUID("5b0f3f4e-8a0c-4d5e-9b8e-2f6a1c7d9e40")
"""Namespace of delivery ids (``delivery_id``)."""


def delivery_id(job_id: str, occasion: str, index: int) -> str:
    """The id of the delivery of ``occasion`` (``final:<run>``, ``pause:<seq>``) to webhook number
    ``index`` of the job's spec: the same wherever and however often it is computed."""
    return str(uuid.uuid5(_DELIVERY_IDS, f"{job_id}/{occasion}/{index}"))


class Delivery(BaseModel):
    """What one delivery POSTs, fixed when it is planned: every attempt sends the same ``body``."""

    id: str
    job_id: str
    url: str
    event: str
    """``final`` or ``waiting_for_person``."""
    body: str
    """The JSON text POSTed (signed as is)."""


@dataclass(frozen=True)
class DeliveryState:
    """Where one delivery stands: ``state`` (``pending``, ``delivered``, ``failed``), attempts
    started, when the next is due and when the live attempt's lease ends (Redis time, seconds)."""

    delivery: Delivery
    state: str
    attempt: int
    due: float
    lease: float


@dataclass(frozen=True)
class Claimed:
    """A delivery taken for one attempt (its number, from 1)."""

    delivery: Delivery
    attempt: int


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class WebhookOutbox:
    """The webhook deliveries of the jobs in one store (see the module docstring)."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self._claim = redis.register_script(lua("webhook_claim"))
        self._report = redis.register_script(lua("webhook_report"))

    def key(self, job_id: str) -> str:
        """The hash of a job's deliveries."""
        return job_key(self.prefix, job_id, "webhooks")

    def shard_key(self, job_id: str) -> str:
        """The shard of the webhook index ``job_id`` is in."""
        return webhook_shard_key(self.prefix, zlib.crc32(job_id.encode()) % LIVE_SHARDS)

    def plan(self, deliveries: Sequence[Delivery], ttl: int, at: float) -> None:
        """Write each delivery unless it is there (pending, due now), and have the sweeper look
        at the job by ``at`` (Unix time); the job's deliveries live ``ttl`` seconds from now."""
        if not deliveries:
            return
        job_id = deliveries[0].job_id
        key = self.key(job_id)
        pipe = self.redis.pipeline(transaction=True)
        for d in deliveries:
            pipe.hsetnx(key, d.id, d.model_dump_json())
            pipe.hsetnx(key, f"{d.id}:state", "pending")
            pipe.hsetnx(key, f"{d.id}:attempt", 0)
            pipe.hsetnx(key, f"{d.id}:due", 0)
            pipe.hsetnx(key, f"{d.id}:lease", 0)
        pipe.expire(key, max(ttl, 1))
        pipe.execute()
        self.watch(job_id, at, ttl)

    def watch(self, job_id: str, at: float, ttl: int) -> None:
        """Have the sweeper look at ``job_id`` by ``at`` (an earlier look it has stays)."""
        zadd_with_ttl(self.redis, self.shard_key(job_id), ttl, {job_id: at}, "LT", mode="max")

    def look_again(self, job_id: str, at: float) -> None:
        """Set when the sweeper next looks at ``job_id`` (``at``, Unix time)."""
        self.redis.zadd(self.shard_key(job_id), {job_id: at}, xx=True)

    def unwatch(self, job_id: str) -> None:
        """Take ``job_id`` out of the webhook index (nothing left to deliver or to wait for)."""
        self.redis.zrem(self.shard_key(job_id), job_id)

    def claim(self, job_id: str, delivery: str, lease: float) -> Claimed | tuple[str, float]:
        """Take ``delivery`` for one attempt held ``lease`` seconds, or say why not: ``("gone" |
        "delivered" | "failed", 0)``, ``("early", due)``, ``("busy", lease end)``."""
        reply = self._claim(keys=[self.key(job_id)], args=[delivery, f"{lease:.3f}"])
        verdict = _text(reply[0])
        if verdict != "ok":
            return verdict, float(_text(reply[1])) if len(reply) > 1 else 0.0
        return Claimed(Delivery.model_validate_json(_text(reply[2])), int(reply[1]))

    def report(self, job_id: str, delivery: str, attempt: int, outcome: str, delay: float = 0.0) -> str:
        """Settle attempt ``attempt`` (``outcome`` ``delivered`` or ``failed``) or schedule the next
        one ``delay`` seconds from now (``retry``). Returns ``""`` when the attempt no longer holds
        the delivery (nothing changed), else the outcome, or for ``retry`` when the next is due."""
        reply = self._report(keys=[self.key(job_id)], args=[delivery, attempt, outcome, f"{delay:.3f}"])
        return _text(reply)

    def deliveries(self, job_id: str) -> list[DeliveryState]:
        """Every delivery of the job, with where it stands."""
        raw = {_text(k): _text(v) for k, v in self.redis.hgetall(self.key(job_id)).items()}
        out = []
        for name, value in raw.items():
            if ":" in name:
                continue
            out.append(
                DeliveryState(
                    Delivery.model_validate(json.loads(value)),
                    raw.get(f"{name}:state", "pending"),
                    int(raw.get(f"{name}:attempt", "0") or 0),
                    float(raw.get(f"{name}:due", "0") or 0),
                    float(raw.get(f"{name}:lease", "0") or 0),
                )
            )
        return out

    def due_jobs(self, shard: int, now: float, count: int) -> list[str]:
        """Up to ``count`` jobs of ``shard`` due for a look at ``now``."""
        raw = self.redis.zrangebyscore(webhook_shard_key(self.prefix, shard), "-inf", now, start=0, num=count)
        return [_text(x) for x in raw]
