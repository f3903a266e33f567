"""The messages that wake a job's steps: which task wakes which kind of step, and with what
arguments (``[job, round]``, plus the call index of a ``tools`` step).

Pure: nothing here imports the Celery app, so the client side (approvals, resume) builds a step's
messages without creating the app from the environment at import (``tandem.tasks.steps.dispatch``
sends them).
"""

from __future__ import annotations

from collections.abc import Sequence

from tandem.reasoner.loop.step import Step
from tandem.tasks.state.claims import Message

STEP_TASKS: dict[str, str] = {
    "thinker": "tandem.thinker_turn",
    "actor": "tandem.actor_turn",
    "tools": "tandem.run_tool",
    "collect": "tandem.collect_tools",
    "finalize": "tandem.finalize",
    "compact_thinker": "tandem.compact_thinker",
    "compact_actor": "tandem.compact_actor",
}
"""The task that wakes each kind of step."""


def step_messages(job_id: str, step: Step, indices: Sequence[int] | None = None) -> list[Message]:
    """The messages that wake ``step`` (every call of a ``tools`` step, or only ``indices``)."""
    if step.kind == "tools":
        chosen = indices if indices is not None else range(1, step.calls + 1)
        return [{"task": STEP_TASKS["tools"], "args": [job_id, step.round, i]} for i in chosen]
    return [{"task": STEP_TASKS[step.kind], "args": [job_id, step.round]}]
