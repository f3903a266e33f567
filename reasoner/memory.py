"""Where a job's conversation lives: in the process, or in Redis between Celery tasks.

Writes are idempotent: a message is identified by ``(round, role)`` and the first write of a
key wins, so a step that runs twice (a redelivered task) stores one message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tandem.reasoner.messages import ModelMessage, Role
from tandem.reasoner.ttl_writes import write_with_ttl
from tandem.toolkit.artifacts import InMemoryArtifactStore

if TYPE_CHECKING:
    from redis import Redis

_ROLE_ORDER: dict[str, int] = {"person": -1, "thinker": 0, "actor": 1, "tool": 2, "summary": 3}


def _order(message: ModelMessage) -> tuple[int, int, str]:
    # A person's messages open their round (the leading model reads them first), by id (arrival).
    return message.round, _ROLE_ORDER[message.role], message.message_id or ""


@runtime_checkable
class ReasonerMemory(Protocol):
    """The messages of one job, in round order (a person's messages, thinker, actor, tool within
    a round)."""

    def add_message(self, message: ModelMessage) -> bool:
        """Store ``message`` unless its key is already stored; ``True`` if it was stored."""
        ...

    def get_message(self, round_no: int, role: Role) -> ModelMessage | None:
        """The message stored for ``(round_no, role)``, if any."""
        ...

    def get_messages(self) -> list[ModelMessage]:
        """All messages in order."""
        ...

    def clear(self) -> None:
        """Forget every message."""
        ...

    def expire(self, seconds: int) -> None:
        """Keep the messages for ``seconds`` more, then drop them (called when the job ends)."""
        ...


class InMemoryReasonerMemory:
    """A job's messages in a dict, for in-process runs and tests, with the run's ``artifacts``
    (tool outputs kept whole: ``tandem.reasoner.artifacts``), counted with the messages against
    the run's memory limit."""

    def __init__(self, messages: list[ModelMessage] | None = None) -> None:
        self._messages: dict[str, ModelMessage] = {}
        self.artifacts = InMemoryArtifactStore(self.size_bytes)
        """The run's artifacts: ``artifacts.get(handle)`` is an output's whole text."""
        for message in messages or []:
            self.add_message(message)

    def add_message(self, message: ModelMessage) -> bool:
        """Store ``message`` unless its key is already stored; ``True`` if it was stored."""
        if message.key in self._messages:
            return False
        self._messages[message.key] = message
        return True

    def get_message(self, round_no: int, role: Role) -> ModelMessage | None:
        """The message stored for ``(round_no, role)``, if any."""
        return self._messages.get(f"{round_no}:{role}")

    def get_messages(self) -> list[ModelMessage]:
        """All messages in order."""
        return sorted(self._messages.values(), key=_order)

    def size_bytes(self) -> int:
        """The messages' size as JSON (UTF-8 bytes), as the memory limit counts it."""
        return sum(len(m.model_dump_json().encode("utf-8", "surrogatepass")) for m in self._messages.values())

    def clear(self) -> None:
        """Forget every message."""
        self._messages.clear()

    def expire(self, seconds: int) -> None:
        """Nothing to expire in process memory; kept for the protocol."""


class RedisReasonerMemory:
    """A job's messages in one Redis hash, ``{prefix}:{<job_id>}:memory``, as JSON.

    Field names are the message keys; ``HSETNX`` makes writes idempotent. With ``ttl`` the hash
    expires ``ttl`` seconds after the write that made it (the same step: ``write_with_ttl``);
    ``expire`` sets its TTL again when the job ends. (The key carries the job's hash tag, like
    every key of a job.)
    """

    def __init__(self, redis: Redis, job_id: str, *, prefix: str = "tandem", ttl: int | None = None) -> None:
        self.redis = redis
        self.job_id = job_id
        self.key = f"{prefix}:{{{job_id}}}:memory"
        self.ttl = ttl

    def add_message(self, message: ModelMessage) -> bool:
        """Store ``message`` unless its key is already stored; ``True`` if it was stored."""
        if self.ttl is None:
            return bool(self.redis.hsetnx(self.key, message.key, message.model_dump_json()))
        return bool(
            write_with_ttl(self.redis, self.key, self.ttl, "HSETNX", message.key, message.model_dump_json())
        )

    def get_message(self, round_no: int, role: Role) -> ModelMessage | None:
        """The message stored for ``(round_no, role)``, if any."""
        raw = self.redis.hget(self.key, f"{round_no}:{role}")
        return None if raw is None else ModelMessage.model_validate_json(raw)

    def get_messages(self) -> list[ModelMessage]:
        """All messages in order."""
        raw = self.redis.hvals(self.key)
        return sorted((ModelMessage.model_validate_json(v) for v in raw), key=_order)

    def clear(self) -> None:
        """Forget every message."""
        self.redis.delete(self.key)

    def expire(self, seconds: int) -> None:
        """Drop the messages ``seconds`` from now."""
        self.redis.expire(self.key, seconds)
