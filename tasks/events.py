"""``EventHooks``: the reasoning loop's hooks, published to the job's Redis stream.

Model replies stream through a ``DeltaCoalescer``: the deltas a model service hands to its
``on_delta`` listener (already split into reasoning and content by the role's reasoning parser)
are gathered and published as ``model_delta`` events at most every ``delta_interval`` seconds, or
once ``delta_max_chars`` characters wait, so a fast host costs a bounded number of Redis writes.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.messages import FunctionCallResult, ModelMessage
from tandem.tasks.job_events import (
    JobEvent,
    MemoryCompacted,
    ModelDelta,
    ModelReply,
    RoundStarted,
    ToolCall,
    ToolResult,
)
from tandem.tasks.state.store import JobStore

if TYPE_CHECKING:
    from tandem.reasoner.context.compaction import Compaction
    from tandem.reasoner.function_calling import ParsedFunctionCall
    from tandem.reasoner.models.model_service import DeltaListener


class DeltaCoalescer:
    """Gathers a reply's deltas and hands them to ``emit(reasoning, content)`` in batches.

    A batch goes out when ``interval`` seconds have passed since the last one, or when
    ``max_chars`` characters wait; ``flush`` sends what is left. Order is kept and nothing is
    dropped: the emitted texts concatenate to the fed texts.
    """

    def __init__(
        self,
        emit: Callable[[str, str], None],
        *,
        interval: float = 0.1,
        max_chars: int = 512,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._emit = emit
        self.interval = interval
        self.max_chars = max_chars
        self._clock = clock
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._waiting = 0
        self._last = clock()
        self._lock = threading.Lock()

    def __call__(self, reasoning: str, content: str) -> None:
        """Take one delta; publish the batch if it is due."""
        if not reasoning and not content:
            return
        with self._lock:
            # A reply that switches from content back to reasoning would otherwise interleave
            # wrongly inside one batch: send what waits first.
            if reasoning and self._content:
                self._send()
            if reasoning:
                self._reasoning.append(reasoning)
            if content:
                self._content.append(content)
            self._waiting += len(reasoning) + len(content)
            if self._waiting >= self.max_chars or self._clock() - self._last >= self.interval:
                self._send()

    def flush(self) -> None:
        """Publish whatever waits."""
        with self._lock:
            self._send()

    def _send(self) -> None:
        if not self._waiting:
            return
        reasoning, content = "".join(self._reasoning), "".join(self._content)
        self._reasoning.clear()
        self._content.clear()
        self._waiting = 0
        self._last = self._clock()
        self._emit(reasoning, content)


def streams(model: object) -> bool:
    """Whether ``model`` hands its delta listener a reply while it is written: ``False`` only for a
    service (or a wrapper's ``inner`` one) whose ``stream`` is off, such as LiteLLM's by default."""
    inner = getattr(model, "inner", model)
    return getattr(inner, "stream", True) is not False


class EventHooks(ReasonerHooks):
    """Publishes round starts, model deltas and replies, tool calls and results.

    ``live``: whether the model streams its replies. A reply that is not streamed reaches its
    listener once, whole, when it has ended: its ``model_reply`` carries the same text, so no
    ``model_delta`` is published for it (one ``XADD`` and one copy of the text less per call).
    ``epoch``: the epoch of the claim of the step these hooks serve; its ``model_delta`` events are
    written only while that claim is the job's latest (``JobStore.append_delta``), so a worker cut
    off past its lease writes no token once another took its step over. ``None``: not fenced (a
    reasoner run in-process).
    """

    def __init__(self, store: JobStore, job_id: str, *, live: bool = True, epoch: int | None = None) -> None:
        self.store = store
        self.job_id = job_id
        self.live = live
        self.epoch = epoch
        self._streams: dict[tuple[int, str], DeltaCoalescer] = {}
        self._batch: list[JobEvent] | None = None
        self._opening: RoundStarted | None = None

    def open_with_first_delta(self, round_no: int, max_rounds: int) -> None:
        """Round ``round_no`` starts with the next model call, whose ``round_started`` a step holds
        until its commit: if that call streams, its first ``model_delta`` is written after the
        round's ``round_started`` in the same round trip (``JobStore.append_delta``, which
        writes it only once per round), so no token of a round comes before the round."""
        self._opening = RoundStarted(round=round_no, max_rounds=max_rounds)

    @contextmanager
    def batched(self) -> Iterator[None]:
        """Publish the events of the block together, in order, in one round trip at its end."""
        self._batch = []
        try:
            yield
        finally:
            events, self._batch = self._batch, None
            if events:
                self.store.append_all(self.job_id, events)

    @contextmanager
    def collected(self) -> Iterator[list[JobEvent]]:
        """Gather the events of the block, in order, unwritten: the caller writes them (a step's
        commit, which appends them atomically with what it stores)."""
        gathered: list[JobEvent] = []
        self._batch = gathered
        try:
            yield gathered
        finally:
            self._batch = None

    def _append(self, event: JobEvent) -> None:
        if self._batch is not None:
            self._batch.append(event)
        else:
            self.store.append(self.job_id, event)

    def round_started(self, round_no: int, max_rounds: int) -> None:
        """Publish ``round_started``."""
        self._append(RoundStarted(round=round_no, max_rounds=max_rounds))

    def model_streaming(self, round_no: int, role: str) -> DeltaListener | None:
        """A coalescing listener that publishes ``model_delta`` events (``None`` when deltas are off)."""
        settings = self.store.stream
        opening, self._opening = self._opening, None
        if not settings.deltas or not self.live:
            return None  # the round_started goes with the commit
        if opening is not None and opening.round != round_no:
            opening = None
        attempt = uuid.uuid4().hex[:12]
        seq = 0

        def emit(reasoning: str, content: str) -> None:
            nonlocal seq, opening
            delta = ModelDelta(
                round=round_no, role=role, attempt=attempt, seq=seq, reasoning=reasoning, content=content
            )
            seq += 1
            if opening is not None or self.epoch is not None:
                first, opening = opening, None
                self.store.append_delta(self.job_id, delta, epoch=self.epoch, opening=first)
            else:
                self.store.append(self.job_id, delta)

        coalescer = DeltaCoalescer(emit, interval=settings.delta_interval, max_chars=settings.delta_max_chars)
        self._streams[(round_no, role)] = coalescer
        return coalescer

    def model_streamed(self, round_no: int, role: str) -> None:
        """Publish the deltas still waiting (before the ``model_reply`` event)."""
        coalescer = self._streams.pop((round_no, role), None)
        if coalescer is not None:
            coalescer.flush()

    def model_replied(self, message: ModelMessage) -> None:
        """Publish ``model_reply`` with the role, the reasoning and the content."""
        self._append(
            ModelReply(
                round=message.round,
                role=message.role,
                model=message.model,
                reasoning=message.reasoning,
                content=message.content,
                usage=message.usage.model_dump(),
            ),
        )

    def memory_compacted(self, compaction: Compaction) -> None:
        """Publish ``memory_compacted``."""
        self._append(
            MemoryCompacted(
                round=compaction.round,
                role=compaction.role,
                tokens_before=compaction.tokens_before,
                tokens_after=compaction.tokens_after,
                summary_of_rounds=list(compaction.summary_of_rounds),
                rounds_summarized=compaction.rounds_summarized,
                rounds_dropped=list(compaction.rounds_dropped),
                how=compaction.how,
            )
        )

    def tool_called(self, round_no: int, index: int, call: ParsedFunctionCall, *, attempt: int = 1) -> None:
        """Publish ``tool_call`` (``attempt``: which run of the call this is, from 1)."""
        self._append(
            ToolCall(
                round=round_no, index=index, name=call.name, args=call.args, error=call.error, attempt=attempt
            ),
        )

    def tool_returned(self, round_no: int, result: FunctionCallResult) -> None:
        """Publish ``tool_result``."""
        self._append(tool_result_event(round_no, result))


def tool_result_event(round_no: int, result: FunctionCallResult) -> ToolResult:
    """The ``tool_result`` event of ``result`` (a worker's call stores it with the result:
    ``JobMachine.call_done``)."""
    return ToolResult.model_validate({"round": round_no, **result.model_dump(mode="json")})
