"""Hooks the reasoning loop always calls; the defaults do nothing.

Logging, live display and the Celery event stream hang off these instead of ``if`` branches in
the loop. Subclass ``ReasonerHooks`` and override what you need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.reasoner.messages import FunctionCallResult, ModelMessage

if TYPE_CHECKING:
    from tandem.reasoner.approval import Decision, PendingCall
    from tandem.reasoner.context.compaction import Compaction
    from tandem.reasoner.function_calling import ParsedFunctionCall
    from tandem.reasoner.models.model_service import DeltaListener
    from tandem.reasoner.task import ReasonerOutcome


class ReasonerHooks:
    """No-op hooks called at each point of a run."""

    def round_started(self, round_no: int, max_rounds: int) -> None:
        """A round begins (``round_no`` counts from 0)."""

    def model_streaming(self, round_no: int, role: str) -> DeltaListener | None:
        """A model call of ``role`` begins: return a listener for its reply's deltas, or ``None``."""
        return None

    def model_streamed(self, round_no: int, role: str) -> None:
        """The model call ended (replied or failed): flush what its listener still holds."""

    def model_replied(self, message: ModelMessage) -> None:
        """A model reply was stored (its ``reasoning`` and ``content`` are apart)."""

    def memory_compacted(self, compaction: Compaction) -> None:
        """A model request left out rounds of its role's view to fit its context budget (the
        stored memory is unchanged)."""

    def tool_called(self, round_no: int, index: int, call: ParsedFunctionCall) -> None:
        """A tool call is about to run (``index`` counts from 1 in reply order)."""

    def tool_returned(self, round_no: int, result: FunctionCallResult) -> None:
        """A tool call finished (succeeded or failed)."""

    def approval_requested(self, round_no: int, pending: list[PendingCall]) -> None:
        """Calls of ``round_no`` wait for a decision (index, tool, args, objective of each)."""

    def approval_decided(self, round_no: int, decisions: list[Decision]) -> None:
        """The decisions on the waiting calls of ``round_no`` (a timeout gives rejections)."""

    def finished(self, outcome: ReasonerOutcome) -> None:
        """The run ended."""


NO_HOOKS = ReasonerHooks()


def streaming_listener(
    hooks: ReasonerHooks, round_no: int, role: str, on_delta: DeltaListener | None
) -> DeltaListener | None:
    """The listener a step passes to ``generate``: the caller's ``on_delta``, the hooks', or both."""
    from_hooks = hooks.model_streaming(round_no, role)
    if from_hooks is None or on_delta is None:
        return from_hooks or on_delta
    caller = on_delta

    def both(reasoning: str, content: str) -> None:
        caller(reasoning, content)
        from_hooks(reasoning, content)

    return both
