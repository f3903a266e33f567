"""``RedisArtifactStore``: a job's artifacts in one Redis hash beside its other keys.

The hash is ``{prefix}:{<job_id>}:artifacts`` (a part of the job, ``JOB_PARTS``): field ``<handle>``
holds an artifact's whole text, field ``#bytes`` the bytes of them all. Being one of the job's
parts, it shares the job's hash tag (one Redis Cluster slot) and its TTL: every transition that sets
the TTL of the job's keys (the end, a resume, a park) sets this one's too, and a new hash takes the
record's TTL when it is written (``scripts/artifact_put.lua``).

A write is one script: it refuses an artifact that would bring the job's conversation (its
``memory`` hash) and its artifacts over the job's memory limit, and writes a handle once, so a
tool call run twice stores one artifact (handles are derived from the text:
``tandem.toolkit.artifacts``). An artifact whose call then lost its claim is left to expire with
the job (it still counts against the limit meanwhile).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from redis import Redis

from tandem.tasks.state.keys import job_key
from tandem.tasks.state.record import text as _text
from tandem.tasks.state.scripts import lua
from tandem.toolkit.artifacts import ArtifactRef, storable, text_bytes

__all__ = ["TOTAL_FIELD", "RedisArtifactStore", "copy_artifacts"]

TOTAL_FIELD = "#bytes"
"""The field of the artifacts hash that counts the bytes of every artifact (never a handle)."""


class RedisArtifactStore:
    """The artifacts of job ``job_id`` (an ``ArtifactStore``; see the module docstring). ``ttl``:
    the TTL of a new hash when the job's record has none (the store's ``TANDEM_MEMORY_TTL``)."""

    def __init__(self, redis: Redis, job_id: str, *, prefix: str = "tandem", ttl: int = 86400) -> None:
        self.redis = redis
        self.job_id = job_id
        self.prefix = prefix
        self.ttl = ttl
        self.key = job_key(prefix, job_id, "artifacts")

    @cached_property
    def _put(self) -> Any:
        return self.redis.register_script(lua("artifact_put"))

    def put(self, handle: str, text: str, *, limit: int | None = None) -> ArtifactRef | None:
        """Store ``text`` under ``handle`` once; ``None`` when it would bring the job's memory over
        ``limit`` bytes."""
        text = storable(text)
        size = text_bytes(text)
        keys = [
            self.key,
            job_key(self.prefix, self.job_id, "memory"),
            job_key(self.prefix, self.job_id, "state"),
        ]
        verdict, _ = (_text(v) for v in self._put(keys=keys, args=[handle, text, size, limit or 0, self.ttl]))
        if verdict == "full":
            return None
        return ArtifactRef(handle=handle, chars=len(text), bytes=size)

    def get(self, handle: str) -> str | None:
        """The whole text under ``handle``, or ``None`` for a handle the job does not hold."""
        if handle == TOTAL_FIELD:
            return None
        raw = self.redis.hget(self.key, handle)
        return None if raw is None else _text(raw)

    def total_bytes(self) -> int:
        """The bytes of every artifact of the job."""
        return int(_text(self.redis.hget(self.key, TOTAL_FIELD) or 0))

    def handles(self) -> list[str]:
        """The handles the job holds."""
        return sorted(h for h in (_text(f) for f in self.redis.hkeys(self.key)) if h != TOTAL_FIELD)


def copy_artifacts(source: RedisArtifactStore, target: RedisArtifactStore, handles: list[str]) -> int:
    """Copy the artifacts ``handles`` of ``source`` that it still holds into ``target`` (a fork
    of its job), each written once; how many ``target`` holds of them afterwards."""
    copied = 0
    for handle in dict.fromkeys(handles):
        text = source.get(handle)
        if text is not None and target.put(handle, text) is not None:
            copied += 1
    return copied
