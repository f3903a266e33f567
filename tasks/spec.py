"""What crosses the wire for a job: ``JobSpec`` in, ``JobStatus`` while it runs, ``JobResult`` out."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tandem.reasoner.messages import Usage
from tandem.tasks.errors import JobSpecError

ReasonerKind = Literal["dual", "mono", "react"]
JobState = Literal["queued", "running", "completed", "truncated", "failed", "cancelled"]
FINAL_STATES: frozenset[str] = frozenset({"completed", "truncated", "failed", "cancelled"})


class JobSpec(BaseModel):
    """A job as a client submits it (``tandem.infer``'s ``spec`` argument)."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, description="What the job must achieve.")
    context: str = ""
    reasoner: ReasonerKind = "dual"
    actions: list[str] = Field(default_factory=list, description="Toolkit actions to start from.")
    tools: list[str] | None = Field(default=None, description="Allow-list of tool names.")
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    hops: int = Field(default=0, ge=0, le=10)
    max_rounds: int = Field(default=20, ge=1, le=500)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("goal")
    @classmethod
    def _goal_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the goal is blank: say what the job must achieve")
        return value


def validate_spec(raw: JobSpec | dict[str, Any]) -> JobSpec:
    """A ``JobSpec`` from a dict; ``JobSpecError`` naming the field and the reason if invalid."""
    if isinstance(raw, JobSpec):
        return raw
    if not isinstance(raw, dict):
        raise JobSpecError(f"a job spec must be a JSON object, got {type(raw).__name__}")
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(spec)"
            reason = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"field {where!r}: {reason} (got {err.get('input')!r})"[:300])
        raise JobSpecError("invalid job spec: " + "; ".join(problems)) from None


class JobStatus(BaseModel):
    """Where a job stands, kept in Redis and updated by every step."""

    job_id: str
    state: JobState = "queued"
    reasoner: ReasonerKind = "dual"
    round: int = 0
    step: str = ""
    error: str | None = None
    updated_at: float = 0.0


class JobResult(BaseModel):
    """How a job ended: the result of ``tandem.infer`` (as a JSON dict) and of ``JobHandle.result``."""

    job_id: str
    status: Literal["completed", "truncated", "failed", "cancelled"]
    deliverable: str = ""
    rounds: int = 0
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
