"""``Task`` (what to reason about) and ``ReasonerOutcome`` (how it ended)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from tandem.reasoner.approval import validate_approve_tools
from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.messages import ModelMessage, Usage
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.toolkit.action import Action
    from tandem.toolkit.graph import Toolkit

OutcomeStatus = Literal["completed", "truncated", "failed"]


@dataclass
class Task:
    """A goal for a reasoner, with the tools it may use and its round budget.

    Tools come from ``tools`` and, when ``toolkit`` is set, from the toolkit: the tools that the
    ``actions`` lead to (see ``ToolkitService.recommend_subgraph``), or every toolkit tool when no
    actions are named. ``allowed_tools`` narrows the result to those names.

    Calls to tools declaring ``requires_approval``, and to those ``approve_tools`` names
    (``"all"``: every tool), wait for the reasoner's ``approve`` callback; with
    ``approval_timeout_s`` set, no decision in time rejects them (see ``tandem.reasoner.approval``).
    """

    goal: str
    context: str = ""
    tools: list[Tool] = field(default_factory=list)
    max_rounds: int = 10
    toolkit: Toolkit | None = None
    actions: list[str] = field(default_factory=list)
    threshold: float = 0.5
    hops: int = 0
    allowed_tools: list[str] | None = None
    job_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    """Credentials for the tools, injected as ``ToolCallContext.secrets``; never put in a prompt."""
    max_memory_bytes: int | None = None
    """The conversation's size (JSON bytes) past which the next model step fails the run."""
    approve_tools: list[str] | Literal["all"] = field(default_factory=list)
    approval_timeout_s: float | None = None
    ask_person: bool = False
    """Offer the model the built-in ``ask_person`` tool (a question to a person, answered by the
    reasoner's ``ask`` callback in process; see ``tandem.reasoner.questions``)."""
    answer_timeout_s: float | None = None
    """Seconds a question (``ask_person``, ``ToolCallContext.ask``) waits for its answer; none in
    time fails the question with ``no answer within N s``. ``None``: no limit in process."""

    spawn_jobs: bool = False
    """Offer the model the built-in ``spawn_jobs`` tool (child jobs; workers only, for the tenants
    of ``TANDEM_SPAWN_TENANTS``: see ``tandem.toolkit.children``)."""

    def __post_init__(self) -> None:
        if not self.goal or not self.goal.strip():
            raise ConfigurationError("Task.goal is empty: say what the reasoner should achieve")
        if self.max_rounds < 1:
            raise ConfigurationError(f"Task.max_rounds must be at least 1, got {self.max_rounds!r}")
        try:
            self.approve_tools = validate_approve_tools(self.approve_tools)
        except ValueError as exc:
            raise ConfigurationError(f"Task.{exc}") from None
        for name in ("approval_timeout_s", "answer_timeout_s"):
            timeout = getattr(self, name)
            if timeout is not None and (
                isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
            ):
                raise ConfigurationError(
                    f"Task.{name} must be a positive number of seconds or None, got {timeout!r}"
                )

    def recommend(self) -> tuple[list[Tool], list[Action]]:
        """The tools and actions offered to the Actor for this task."""
        tools: dict[str, Tool] = {t.name: t for t in self.tools}
        actions: list[Action] = []
        if self.toolkit is not None:
            if self.actions:
                from tandem.toolkit.service import ToolkitService

                service = ToolkitService(self.toolkit)
                found, actions = service.recommend_tools_actions(
                    list(self.actions), threshold=self.threshold, hops=self.hops
                )
            else:
                found = self.toolkit.tools()
            for t in found:
                tools.setdefault(t.name, t)
        if self.allowed_tools is not None:
            allowed = set(self.allowed_tools)
            tools = {name: t for name, t in tools.items() if name in allowed}
        if self.ask_person:
            from tandem.reasoner.questions import ASK_PERSON, ask_person_tool

            tools.setdefault(ASK_PERSON, ask_person_tool(self.answer_timeout_s))
        if self.spawn_jobs:
            from tandem.reasoner.spawning import SPAWN_JOBS, spawn_jobs_tool

            tools.setdefault(SPAWN_JOBS, spawn_jobs_tool())
        return list(tools.values()), actions


class ReasonerOutcome(BaseModel):
    """How a run ended: ``completed`` with a deliverable, ``truncated`` at ``max_rounds``, or
    ``failed`` with ``error`` (the messages so far are kept either way)."""

    status: OutcomeStatus
    deliverable: str = ""
    rounds: int = 0
    messages: list[ModelMessage] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None
    artifacts: dict[str, str] = Field(default_factory=dict)
    """The whole text of every tool output kept as an artifact, by handle (a result's
    ``artifact.handle``; ``tandem.reasoner.artifacts``)."""
