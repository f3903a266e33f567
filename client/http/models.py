"""What the API's answers hold, as lenient pydantic models: a field the server adds later is kept
(``model_extra``), never refused, so an older client reads a newer server. A job's events are the
typed models of ``tandem.client.events``, as the direct client's."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_LENIENT = ConfigDict(extra="allow")

FINAL = frozenset({"completed", "truncated", "failed", "cancelled"})
"""The states of a job that has ended."""


class JobState(BaseModel):
    """Where a job stands (``status`` of ``GET /v1/jobs/{id}``; see the API's ``JobStatus``)."""

    model_config = _LENIENT

    job_id: str
    state: str
    reasoner: str = ""
    round: int = 0
    step: str = ""
    error: str | None = None
    waiting_for: str | None = None
    until: float | None = None
    deadline: float | None = None
    pending_approval: list[dict[str, Any]] | None = None
    """While ``awaiting_approval``: the calls waiting for a decision (index, tool, args, ...)."""
    pause_id: str | None = None
    """While ``awaiting_approval``: the id of the pause, which a decision or an answer names."""
    pause_kind: str | None = None
    """While ``awaiting_approval``: ``approval`` (calls wait for a decision) or ``question``; while
    ``waiting_for_children``: ``children``."""
    question: dict[str, Any] | None = None
    """While waiting on a question: its ``text``, ``answer_schema``, ``call_index``, ``tool``, ``until``."""

    @property
    def ended(self) -> bool:
        """Whether the job has ended (completed, truncated, failed or cancelled)."""
        return self.state in FINAL


class JobOutcome(BaseModel):
    """How a job ended (``result`` of ``GET /v1/jobs/{id}``; see the API's ``JobResult``)."""

    model_config = _LENIENT

    job_id: str
    status: str
    deliverable: str = ""
    rounds: int = 0
    error: str | None = None
    usage: dict[str, Any] = Field(default_factory=dict)
    children: list[str] = Field(default_factory=list)
    """The ids of the child jobs it started (docs/children.md)."""


class Job(BaseModel):
    """A job as ``GET /v1/jobs/{id}`` shows it: its state, its outcome once ended, and the tool
    calls awaiting a decision, if any."""

    model_config = _LENIENT

    id: str
    status: JobState
    result: JobOutcome | None = None
    approval: dict[str, Any] | None = None
    links: dict[str, str] = Field(default_factory=dict)


class ThreadJob(BaseModel):
    """One job of a thread (``GET /v1/threads/{id}``), in the order they joined it."""

    model_config = _LENIENT

    job_id: str
    goal: str = ""
    state: str = ""
    deliverable: str | None = None
    """Its answer, once it ended with one."""
