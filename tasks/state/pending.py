"""What a step produces before it commits: memory writes and hook calls held back.

A step must store nothing and publish nothing unless its transition succeeds (a step that lost
its lease is fenced off). ``PendingMemory`` keeps the step's new messages aside (the transition
stores them in the same atomic script), and ``DeferredHooks`` replays the step's events only
after the commit. Two kinds go out before it, as they happen: a streamed reply's tokens, and the
``round_started`` those tokens open their round with (it must come first: a reader files tokens
under the last round it saw start), written once per round, by whichever write comes first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.memory import RedisReasonerMemory, _order
from tandem.reasoner.messages import FunctionCallResult, ModelMessage, Role

if TYPE_CHECKING:
    from tandem.reasoner.context.compaction import Compaction
    from tandem.reasoner.function_calling import ParsedFunctionCall
    from tandem.reasoner.models.model_service import DeltaListener
    from tandem.reasoner.task import ReasonerOutcome
    from tandem.toolkit.artifacts import ArtifactStore


class PendingMemory:
    """A ``ReasonerMemory`` that reads the job's stored messages and holds new ones back.

    The stored messages are read once, on first use (one ``HVALS``, or none when the step passes
    them in as ``messages``), and served from that snapshot: only the step holding the claim writes
    its round's messages, and only through its transition, so the snapshot stays current for the
    step's life. ``asked``: the keys ``messages`` was read for, when it is not the whole memory
    (a step that needs only its round's messages); any other key makes it read the whole memory.
    """

    def __init__(
        self,
        stored: RedisReasonerMemory,
        messages: Iterable[ModelMessage] | None = None,
        *,
        asked: Iterable[str] | None = None,
        artifacts: ArtifactStore | None = None,
    ) -> None:
        self.stored = stored
        self.artifacts = artifacts
        """The job's artifacts (written as they come: each is written once, by its content)."""
        self._new: dict[str, ModelMessage] = {}
        self._snapshot: dict[str, ModelMessage] | None = (
            None if messages is None else {m.key: m for m in messages}
        )
        self._asked = None if asked is None or messages is None else frozenset(asked)

    def _stored(self, key: str | None = None) -> dict[str, ModelMessage]:
        if self._snapshot is None or (self._asked is not None and (key is None or key not in self._asked)):
            self._snapshot = {m.key: m for m in self.stored.get_messages()}
            self._asked = None
        return self._snapshot

    def add_message(self, message: ModelMessage) -> bool:
        """Hold ``message`` unless its key is stored or held; ``True`` if it was held."""
        if message.key in self._new or message.key in self._stored(message.key):
            return False
        self._new[message.key] = message
        return True

    def get_message(self, round_no: int, role: Role) -> ModelMessage | None:
        """The held or stored message of ``(round_no, role)``."""
        key = f"{round_no}:{role}"
        return self._new.get(key) or self._stored(key).get(key)

    def get_messages(self) -> list[ModelMessage]:
        """Stored and held messages, in order."""
        merged = dict(self._stored())
        for key, message in self._new.items():
            merged.setdefault(key, message)
        return sorted(merged.values(), key=_order)

    def clear(self) -> None:
        """Drop the held messages (the stored ones are not this step's to clear)."""
        self._new.clear()

    def expire(self, seconds: int) -> None:
        """Nothing: the state machine sets the TTLs."""

    def writes(self) -> list[tuple[str, str]]:
        """The held messages as ``(field, JSON)`` pairs for the transition."""
        return [(key, m.model_dump_json()) for key, m in self._new.items()]


class DeferredHooks(ReasonerHooks):
    """Records hook calls and replays them on ``inner``: at ``drain``, whose events the commit
    writes, or at ``flush`` (after the commit)."""

    def __init__(self, inner: ReasonerHooks) -> None:
        self.inner = inner
        self._calls: list[Callable[[], Any]] = []

    def round_started(self, round_no: int, max_rounds: int) -> None:
        """Held until the commit, unless the step's model call streams: then it is written with
        the call's first ``model_delta`` (``EventHooks.open_with_first_delta``), and the commit
        writes it only if that did not (the job's record says which round was announced)."""
        self._calls.append(lambda: self.inner.round_started(round_no, max_rounds))
        opens = getattr(self.inner, "open_with_first_delta", None)
        if callable(opens):
            opens(round_no, max_rounds)

    def model_streaming(self, round_no: int, role: str) -> DeltaListener | None:
        """Passed on at once: tokens are shown as they come (each attempt's deltas carry its own
        ``attempt``, so a reply that a fenced worker streamed is told apart from the stored one)."""
        return self.inner.model_streaming(round_no, role)

    def model_streamed(self, round_no: int, role: str) -> None:
        """Passed on at once, so the last deltas come before the (held) ``model_reply``."""
        self.inner.model_streamed(round_no, role)

    def model_replied(self, message: ModelMessage) -> None:
        """Held until the commit."""
        self._calls.append(lambda: self.inner.model_replied(message))

    def memory_compacted(self, compaction: Compaction) -> None:
        """Held until the commit (a step run again reports the same compaction once)."""
        self._calls.append(lambda: self.inner.memory_compacted(compaction))

    def tool_called(self, round_no: int, index: int, call: ParsedFunctionCall) -> None:
        """Held until the commit."""
        self._calls.append(lambda: self.inner.tool_called(round_no, index, call))

    def tool_returned(self, round_no: int, result: FunctionCallResult) -> None:
        """Held until the commit."""
        self._calls.append(lambda: self.inner.tool_returned(round_no, result))

    def finished(self, outcome: ReasonerOutcome) -> None:
        """Passed on at once."""
        self.inner.finished(outcome)

    def drain(self) -> list[Any] | None:
        """Replay the held calls on ``inner`` and return the events they made, unwritten, for the
        commit to write with what it stores (``EventHooks.collected``); ``None`` (nothing replayed)
        when ``inner`` cannot gather them: ``flush`` after the commit then."""
        collected = getattr(self.inner, "collected", None)
        if not callable(collected):
            return None
        calls, self._calls = self._calls, []
        with collected() as events:
            for call in calls:
                call()
        return list(events)

    def flush(self) -> None:
        """Replay the held calls, in order (their events in one round trip when ``inner`` can
        batch them: ``EventHooks.batched``)."""
        calls, self._calls = self._calls, []
        batched = getattr(self.inner, "batched", None)
        with batched() if callable(batched) else nullcontext():
            for call in calls:
                call()
