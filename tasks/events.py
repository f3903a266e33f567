"""``EventHooks``: the reasoning loop's hooks, published to the job's Redis stream."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.messages import FunctionCallResult, ModelMessage
from tandem.tasks.store import JobStore

if TYPE_CHECKING:
    from tandem.reasoner.function_calling import ParsedFunctionCall


class EventHooks(ReasonerHooks):
    """Publishes round starts, model replies (reasoning and content), tool calls and results."""

    def __init__(self, store: JobStore, job_id: str) -> None:
        self.store = store
        self.job_id = job_id

    def round_started(self, round_no: int, max_rounds: int) -> None:
        """Publish ``round_started``."""
        self.store.publish(self.job_id, "round_started", {"round": round_no, "max_rounds": max_rounds})

    def model_replied(self, message: ModelMessage) -> None:
        """Publish ``model_reply`` with the role, the reasoning and the content."""
        self.store.publish(
            self.job_id,
            "model_reply",
            {
                "round": message.round,
                "role": message.role,
                "model": message.model,
                "reasoning": message.reasoning,
                "content": message.content,
                "usage": message.usage.model_dump(),
            },
        )

    def tool_called(self, round_no: int, index: int, call: ParsedFunctionCall) -> None:
        """Publish ``tool_call``."""
        self.store.publish(
            self.job_id,
            "tool_call",
            {"round": round_no, "index": index, "name": call.name, "args": call.args, "error": call.error},
        )

    def tool_returned(self, round_no: int, result: FunctionCallResult) -> None:
        """Publish ``tool_result``."""
        self.store.publish(self.job_id, "tool_result", {"round": round_no, **result.model_dump(mode="json")})
