"""Writes that wait for replicas: ``TANDEM_REDIS_WAIT_REPLICAS`` (``WAIT N timeout`` after a commit).

Failure model first: Redis replicates asynchronously, so a master answers a write before any
replica has it, and a failover (Sentinel promoting a replica) loses the writes the old master had
not yet sent. Replication is one ordered stream, so what is lost is always the *last* writes: the
new master holds the old one's data as it was a moment earlier. Most of tandem's writes survive
that as they survive a crash of Redis with ``appendfsync everysec``: a step goes back to its previous
state and runs again. Three kinds do not, because something outside Redis acts on them at once:

- an ``at_most_once`` tool call's start mark (``call_started``): the tool runs right after it;
- a job's end (``finish``): its result, ``final`` event and Celery result, which a client may read;
- a decision's acceptance (``settle``): the person is told it was taken.

With ``ReplicaWait.replicas`` = N >= 1 those scripts are sent in one pipeline with ``WAIT N
timeout``, on one connection: ``WAIT`` waits for the replication offset of the *connection's* last
write, so sent on another pooled connection it would wait for that one's and prove nothing. On a
Redis Cluster the pipeline goes to the primary of the key's slot (``WAIT`` sent through the
cluster client would go to every primary, each on its own connection). The number of replicas that
acknowledged comes back as a ``Waited``; fewer than N after ``timeout_ms`` is logged (WARNING) and
put on the current span (event ``tandem.redis.wait_short``); what a step does then is its own
choice (a tool that is ``at_most_once`` does not run: ``tandem.tasks.steps.tools``).

With N = 0 (the default) nothing is waited for and a script costs what it did.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from redis import Redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import AskError, MovedError, NoScriptError
from redis.exceptions import ConnectionError as RedisConnectionError

from tandem.reasoner import tracing

log = logging.getLogger("tandem.redis")

WAIT_SHORT_EVENT = "tandem.redis.wait_short"
"""The span event of a ``WAIT`` that timed out with fewer replicas than asked."""


@dataclass(frozen=True)
class ReplicaWait:
    """How the writes that must survive a failover wait: for ``replicas`` replicas
    (``TANDEM_REDIS_WAIT_REPLICAS``; 0: no wait), at most ``timeout_ms`` milliseconds
    (``TANDEM_REDIS_WAIT_TIMEOUT_MS``)."""

    replicas: int = 0
    timeout_ms: int = 1000

    def __post_init__(self) -> None:
        if self.replicas < 0:
            raise ValueError(f"ReplicaWait.replicas={self.replicas!r}: write 0 (no wait) or more")
        if self.timeout_ms < 1:
            raise ValueError(
                f"ReplicaWait.timeout_ms={self.timeout_ms!r}: write 1 or more (WAIT 0 would block for ever)"
            )


@dataclass(frozen=True)
class Waited:
    """What one ``WAIT`` after write ``what`` of job ``job_id`` got: ``acked`` replicas of the
    ``asked``."""

    what: str
    job_id: str
    asked: int
    acked: int

    @property
    def short(self) -> bool:
        """Fewer replicas acknowledged than asked: the write may be lost in a failover."""
        return self.acked < self.asked


def _slot_client(redis: Redis | RedisCluster, key: str) -> Redis:
    """The client whose connection a pipeline for ``key`` takes: ``redis`` itself, or for a
    cluster the primary of the key's slot."""
    if isinstance(redis, RedisCluster):
        node = redis.get_node_from_key(key)
        if node is None:  # pragma: no cover - only asked for a replica
            raise LookupError(f"no primary holds the slot of key {key!r}")
        return redis.get_redis_connection(node)
    return redis


@cache
def _sha(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()


def run_waited(
    redis: Redis | RedisCluster,
    script: Script,
    source: str,
    keys: Sequence[str],
    args: Sequence[Any],
    wait: ReplicaWait,
    *,
    what: str,
    job_id: str,
) -> tuple[Any, Waited | None]:
    """Run ``script`` (its Lua ``source``) and, with ``wait.replicas`` >= 1, ``WAIT`` for its
    write on the same connection; the script's reply and the ``Waited`` (``None`` without a
    wait). A short wait is reported (``report``) before this returns.

    The pipeline is ``EVALSHA`` then ``WAIT``, one round trip (redis-py's own script call in a
    pipeline would ask ``SCRIPT EXISTS`` first, every time); a server that does not know the
    script yet refuses the ``EVALSHA`` (nothing written), loads it, and the pair is sent again."""
    if wait.replicas < 1:
        return script(keys=list(keys), args=list(args)), None
    client = _slot_client(redis, keys[0])
    for attempt in range(3):
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(_sha(source), len(keys), *keys, *args)
        pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
        try:
            reply, acked = pipe.execute()
        except NoScriptError:
            client.script_load(source)
            continue
        except RedisConnectionError:
            # On a cluster, the slot's primary may have died: the pipeline went to it on a plain
            # connection, which the cluster client's own retries do not cover, so the client would
            # keep the dead node in its layout. It learns the new one now; the step's own retry
            # then goes to the promoted replica (the script may have run: it is not sent again here).
            if isinstance(redis, RedisCluster):
                try:
                    redis.nodes_manager.initialize()
                except Exception as exc:  # no node answers yet: the next attempt asks again
                    log.debug("the cluster's layout could not be read again: %s", exc)
            raise
        except (MovedError, AskError):
            # the slot moved: the cluster client learns the new layout, and the pair goes there
            # (a script refused with MOVED wrote nothing)
            if attempt == 2 or not isinstance(redis, RedisCluster):
                raise
            redis.nodes_manager.initialize()
            client = _slot_client(redis, keys[0])
            continue
        waited = Waited(what, job_id, wait.replicas, int(acked))
        report(waited, wait.timeout_ms)
        return reply, waited
    raise RuntimeError(f"job {job_id}: {what}: the script could not be run on {client!r}")


def report(waited: Waited, timeout_ms: int) -> None:
    """Put the wait on the current span (``tandem.redis.replicas_acked``); a short one also as
    event ``tandem.redis.wait_short`` and a WARNING naming the write and the job."""
    tracing.annotate(
        {"tandem.redis.wait_replicas": waited.asked, "tandem.redis.replicas_acked": waited.acked}
    )
    if not waited.short:
        return
    tracing.event(
        WAIT_SHORT_EVENT,
        {
            "tandem.redis.write": waited.what,
            "tandem.redis.wait_replicas": waited.asked,
            "tandem.redis.replicas_acked": waited.acked,
        },
    )
    log.warning(
        "job %s: %s was acknowledged by %d of %d replicas within %d ms "
        "(TANDEM_REDIS_WAIT_REPLICAS); a failover now could lose it",
        waited.job_id,
        waited.what,
        waited.acked,
        waited.asked,
        timeout_ms,
    )
