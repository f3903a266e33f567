"""``JobRecord``: a job's record (the ``state`` hash the machine's scripts write), typed.

The scripts write every field as a string; ``JobRecord.parse`` reads them leniently (a missing or
malformed number is 0, an unknown state or step kind is kept out of the typed fields), so a record
written by an older worker still reads. The machine's ``record`` gives the raw fields, for
operators and tests; package code reads this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from tandem.reasoner.loop.step import StepKind
from tandem.tasks.spec import JobState, ReasonerKind

EndStatus = Literal["completed", "truncated", "failed", "cancelled"]
"""How a job ends (``JobResult.status``)."""

STEP_KINDS: frozenset[str] = frozenset(get_args(StepKind))
JOB_STATES: frozenset[str] = frozenset(get_args(JobState))
END_STATUSES: frozenset[str] = frozenset(get_args(EndStatus))


def step_kind(text: str) -> StepKind:
    """``text`` as a step kind; ``ValueError`` naming the valid ones if it is none."""
    if text not in STEP_KINDS:
        raise ValueError(f"{text!r} is not a step kind: one of {', '.join(sorted(STEP_KINDS))}")
    return cast(StepKind, text)


def end_status(text: str, default: EndStatus = "completed") -> EndStatus:
    """``text`` as how a job ends, ``default`` when it is empty or none."""
    return cast(EndStatus, text) if text in END_STATUSES else default


def text(value: Any) -> str:
    """A Redis reply (bytes or str) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _number(fields: Mapping[str, str], name: str) -> float:
    try:
        return float(fields.get(name) or 0)
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class JobRecord:
    """The fields of a job's record that code reads (see ``tandem.tasks.state.machine``)."""

    state: JobState
    reasoner: ReasonerKind
    round: int
    kind: StepKind | None
    """The current step's kind; ``None`` while the job is only queued."""
    calls: int = 0
    status: str = ""
    """The status a ``finalize`` step ends the job with."""
    epoch: int = 0
    retries: int = 0
    """How often the current step was parked after a transient failure."""
    expiries: int = 0
    updated_at: float = 0.0
    deadline: float = 0.0
    wait_for: str = ""
    wait_until: float = 0.0
    last_error: str = ""
    error: str = ""
    approval_until: float = 0.0
    owner: str = "default"
    """The tenant that owns the job (``JobSpec.owner``; ``default`` in a record that has none)."""
    spec_version: int = 0
    """The format of the job's stored spec (``tandem.tasks.state.versions``; 0 in a record from
    before versions were kept)."""
    memory_version: int = 0
    """The format of what the job's steps wrote (its memory, tool results, pause records)."""

    @classmethod
    def parse(cls, raw: Mapping[Any, Any]) -> JobRecord | None:
        """The record from its raw hash (bytes or str), ``None`` for no record."""
        if not raw:
            return None
        fields = {text(k): text(v) for k, v in raw.items()}
        state = fields.get("state", "queued")
        reasoner = fields.get("reasoner") or "dual"
        kind = fields.get("kind", "")
        return cls(
            state=cast(JobState, state) if state in JOB_STATES else "queued",
            reasoner=cast(ReasonerKind, reasoner) if reasoner in ("dual", "mono", "react") else "dual",
            round=int(_number(fields, "round")),
            kind=cast(StepKind, kind) if kind in STEP_KINDS else None,
            calls=int(_number(fields, "calls")),
            status=fields.get("status", ""),
            epoch=int(_number(fields, "epoch")),
            retries=int(_number(fields, "retries")),
            expiries=int(_number(fields, "expiries")),
            updated_at=_number(fields, "updated_at"),
            deadline=_number(fields, "deadline"),
            wait_for=fields.get("wait_for", ""),
            wait_until=_number(fields, "wait_until"),
            last_error=fields.get("last_error", ""),
            error=fields.get("error", ""),
            approval_until=_number(fields, "approval_until"),
            owner=fields.get("owner") or "default",
            spec_version=max(int(_number(fields, "spec_version")), 0),
            memory_version=max(int(_number(fields, "memory_version")), 0),
        )

    @property
    def where(self) -> str:
        """The current step, for messages: ``step actor of round 2``."""
        return f"step {self.kind or '?'} of round {self.round}"
