"""Hooks the reasoning loop always calls; the defaults do nothing.

Logging, live display and the Celery event stream hang off these instead of ``if`` branches in
the loop. Subclass ``ReasonerHooks`` and override what you need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.reasoner.messages import FunctionCallResult, ModelMessage

if TYPE_CHECKING:
    from tandem.reasoner.approval import Decision, PendingCall
    from tandem.reasoner.function_calling import ParsedFunctionCall
    from tandem.reasoner.task import ReasonerOutcome


class ReasonerHooks:
    """No-op hooks called at each point of a run."""

    def round_started(self, round_no: int, max_rounds: int) -> None:
        """A round begins (``round_no`` counts from 0)."""

    def model_replied(self, message: ModelMessage) -> None:
        """A model reply was stored (its ``reasoning`` and ``content`` are apart)."""

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
