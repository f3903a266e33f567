"""Writes that carry their key's TTL: the write and the key's ``EXPIRE`` in one Lua step.

Every key has a TTL from the moment it is written (docs/durability.md). A write followed by an
``EXPIRE`` in a later round trip leaves a new key without one in between, and for ever when the
writer dies between the two. ``EXPIRE`` with ``NX`` or ``GT`` in the same transaction would do,
but only from Redis 7; the oldest Redis tandem supports, and the demo's embedded one, is 6.2.
``write_with_ttl`` runs the write and the TTL in one script instead (one round trip, on one key or
two keys of one cluster slot).
"""

from __future__ import annotations

from typing import Any, Literal, cast

from redis.commands.core import Script

TtlMode = Literal["new", "max", "set"]
"""When the key gets ``ttl``: ``new`` only when it has none (a write to an existing key keeps its
TTL), ``max`` when it has none or a shorter one, ``set`` always."""

WRITES = ("HSETNX", "XADD", "ZADD")
"""The commands ``write_with_ttl`` runs."""

KEEP_TTL = b"""
-- KEYS[1]: the key written; KEYS[2], when given: a key whose TTL it takes when that one has one.
-- ARGV[1]: the TTL (seconds); ARGV[2]: the mode (new, max, set); ARGV[3]: the command; ARGV[4..]:
-- its arguments after the key (``write_with_ttl`` checks it is one of ``WRITES``). Returns the
-- command's reply.
local reply = redis.call(ARGV[3], KEYS[1], unpack(ARGV, 4))
local ttl = tonumber(ARGV[1])
if KEYS[2] then
  local like = redis.call('TTL', KEYS[2])
  if like > 0 then ttl = like end
end
local left = redis.call('TTL', KEYS[1])
if left < 0 or ARGV[2] == 'set' or (ARGV[2] == 'max' and left < ttl) then
  redis.call('EXPIRE', KEYS[1], math.max(math.floor(ttl), 1))
end
return reply
"""

_SCRIPT = Script(cast(Any, None), KEEP_TTL)  # run on the client each call is given


def write_with_ttl(
    client: Any,
    key: str,
    ttl: float,
    command: str,
    *args: Any,
    mode: TtlMode = "new",
    like: str | None = None,
) -> Any:
    """Run ``command key *args`` (one of ``WRITES``) and give ``key`` its TTL in the same step:
    ``ttl`` seconds (or, with ``like``, the TTL of that key when it has one: same cluster slot),
    as ``mode`` says. Returns the command's reply.

    ``client`` is a Redis client, a cluster client, or the pipeline of a Redis client (not of a
    cluster client, which refuses scripts in pipelines): the call is then queued and its reply
    comes with the pipeline's. A pipeline checks its scripts with ``SCRIPT EXISTS`` first, which
    the client ACL user of docs/security.md is not granted: pipelines are for the workers' user."""
    if command not in WRITES:
        raise ValueError(f"write_with_ttl runs {', '.join(WRITES)}, not {command!r}")
    keys = [key] if like is None else [key, like]
    return _SCRIPT(keys=keys, args=[max(int(ttl), 1), mode, command, *args], client=client)


ZADD_CHUNK = 2000
"""Members per script call in ``zadd_with_ttl`` (Redis's Lua unpacks at most about 8,000 values)."""


def zadd_with_ttl(
    client: Any,
    key: str,
    ttl: float,
    members: dict[str, float],
    *flags: str,
    mode: TtlMode = "new",
    like: str | None = None,
) -> int:
    """``ZADD key *flags`` of ``members`` (member: score) through ``write_with_ttl``, in chunks of
    ``ZADD_CHUNK`` members (a Redis client, not a pipeline); the number of members added."""
    pairs = [part for member, score in members.items() for part in (score, member)]
    added = 0
    for at in range(0, len(pairs), 2 * ZADD_CHUNK):
        chunk = pairs[at : at + 2 * ZADD_CHUNK]
        added += int(write_with_ttl(client, key, ttl, "ZADD", *flags, *chunk, mode=mode, like=like))
    return added
