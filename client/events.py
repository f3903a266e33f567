"""``JobEvent``: the typed entries of a job's event stream, as every client reads them.

A job's stream is a Redis stream whose entries have three fields: ``type`` (the event kind),
``data`` (a JSON object: the event's fields) and ``at`` (Unix time); the entry id is the event's
``id``, which an SSE client sends back as ``Last-Event-ID``. Workers write these models
(``tandem.tasks.job_events``), and ``JobHandle.events()``, the CLI display, the HTTP API and
``Client.events()`` / ``AsyncClient.events()`` read them back as the same models.

Readers are lenient: an event of a kind this version does not know becomes an ``OtherEvent``
(its fields kept), and fields a newer writer added are kept as extra fields, so an old reader
follows a newer writer's stream. The models need only pydantic (a client over HTTP imports them
without Celery or redis-py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from tandem.reasoner.decisions import Decision, PendingCall
from tandem.reasoner.messages import Usage

if TYPE_CHECKING:
    from tandem.tasks.spec import JobResult

ENVELOPE = frozenset({"id", "type", "at"})
"""The fields every event has besides its own: where it is in the stream and when it was written."""


class _Event(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = ""
    """The Redis stream id (``"<ms>-<seq>"``); empty before the event is written."""
    at: float = 0.0
    """When the event was written (Unix time, seconds)."""

    @property
    def data(self) -> dict[str, Any]:
        """The event's own fields, as stored in the stream's ``data`` field (JSON types)."""
        return self.model_dump(mode="json", exclude=set(ENVELOPE))

    def __getitem__(self, name: str) -> Any:
        """The dict form of earlier versions: ``event["id"|"type"|"at"|"data"]``."""
        if name == "data":
            return self.data
        if name in ENVELOPE:
            return getattr(self, name)
        raise KeyError(name)


class JobStarted(_Event):
    """A worker took the job and stored its spec; or a run of it started again: ``resumed`` (the
    same job, after it ended) or ``forked_from`` (a new job holding the first ``forked_round``
    rounds of that one), at step ``step`` of round ``round``."""

    type: Literal["job_started"] = "job_started"
    spec: dict[str, Any] = Field(default_factory=dict)
    resumed: bool = False
    forked_from: str | None = None
    forked_round: int | None = None
    round: int = 0
    step: str = ""
    epoch: int | None = None
    """For a resumed run: the record's epoch it started at (its claims before are fenced off)."""


class RoundStarted(_Event):
    """Round ``round`` (from 0) of ``max_rounds`` begins."""

    type: Literal["round_started"] = "round_started"
    round: int
    max_rounds: int


class ModelDelta(_Event):
    """Text a model produced since the previous delta of the same reply (coalesced).

    ``reasoning`` and ``content`` come from the role's reasoning parser, so thinking never shows
    up in ``content``. ``attempt`` names one model call: when a step runs again after a worker
    died mid-reply, its deltas carry a new ``attempt`` and a reader starts that reply over.
    Concatenating the deltas of the attempt that was stored gives the ``model_reply`` text.
    """

    type: Literal["model_delta"] = "model_delta"
    round: int
    role: str
    attempt: str = ""
    seq: int = 0
    """Position of this delta in its attempt, from 0."""
    reasoning: str = ""
    content: str = ""


class ModelReply(_Event):
    """A model reply was stored in the job's memory."""

    type: Literal["model_reply"] = "model_reply"
    round: int
    role: str
    model: str | None = None
    reasoning: str = ""
    content: str = ""
    usage: dict[str, Any] = Field(default_factory=dict)


class ToolCall(_Event):
    """A tool call is about to run (``index`` from 1 in reply order).

    ``attempt`` counts from 1: a call that runs again because its first run was cut off (its
    worker was lost, a Redis outage interrupted it) is announced again with the next attempt,
    while its ``tool_result`` is published once, for the run whose result was stored.
    """

    type: Literal["tool_call"] = "tool_call"
    round: int
    index: int
    name: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    attempt: int = 1


class ArtifactInfo(BaseModel):
    """A tool output kept whole as an artifact of its job: its ``handle`` (what
    ``JobHandle.artifact`` and ``GET /v1/jobs/{id}/artifacts/{handle}`` read), its length in
    characters and in UTF-8 bytes."""

    handle: str
    chars: int = 0
    bytes: int = 0


class ToolResult(_Event):
    """A tool call finished (``status`` is ``succeeded`` or ``failed``). ``artifact``: the output
    was over ``TANDEM_ARTIFACT_BYTES`` and is kept whole under this handle (``output`` is then the
    preview the model read); ``None`` otherwise."""

    type: Literal["tool_result"] = "tool_result"
    round: int
    index: int
    name: str = ""
    status: str = ""
    output: Any = ""
    artifact: ArtifactInfo | None = None


class Waiting(_Event):
    """The job's step ``step`` of round ``round`` waits until ``until`` (Unix time) for ``reason``:
    model-host capacity (``in_flight``, ``rpm``, ``tpm``, ``backoff``, ``probe``, on ``host``), or a
    transient failure's retry (``error`` says which; ``detail`` is shown)."""

    type: Literal["waiting"] = "waiting"
    reason: str
    round: int | None = None
    step: str = ""
    until: float | None = None
    error: str = ""
    detail: str = ""
    host: str | None = None

    @property
    def retry_in(self) -> float | None:
        """Seconds from the event to ``until`` (``None`` when either is unknown)."""
        if self.until is None or not self.at:
            return None
        return max(self.until - self.at, 0.0)


class ApprovalRequested(_Event):
    """Tool calls of round ``round`` wait for a person's decision (``pending``) until ``until``
    (Unix time; ``timeout_s`` after they were asked). ``pause_id`` names this pause (job, round,
    step, ``seq``): a decision names it, and one naming another pause is refused."""

    type: Literal["approval_requested"] = "approval_requested"
    round: int
    pause_id: str = ""
    seq: int = 0
    """The pause's number in the job (from 1; it grows with every pause, across resume and fork)."""
    pending: list[PendingCall] = Field(default_factory=list)
    timeout_s: float | None = None
    until: float | None = None


class ApprovalDecided(_Event):
    """Decisions on calls of round ``round`` were stored, made ``by`` a ``person`` or the
    ``timeout``; ``complete`` once every call of the round is decided (the job goes on)."""

    type: Literal["approval_decided"] = "approval_decided"
    round: int
    pause_id: str = ""
    by: str = "person"
    decisions: list[Decision] = Field(default_factory=list)
    complete: bool = False


class QuestionAsked(_Event):
    """Call ``call_index`` (tool ``tool``) of round ``round`` asks a person ``question``; the answer
    must fit ``answer_schema`` (``None``: any JSON value) and comes by ``until`` (Unix time;
    ``timeout_s`` after it was asked) or the question fails. ``pause_id`` names this pause: an
    answer names it, and one naming another pause is refused."""

    type: Literal["question_asked"] = "question_asked"
    round: int
    pause_id: str = ""
    seq: int = 0
    """The pause's number in the job (shared with approvals: it grows with every pause)."""
    call_index: int = 0
    tool: str = ""
    question: str = ""
    answer_schema: dict[str, Any] | None = None
    timeout_s: float | None = None
    until: float | None = None


class QuestionAnswered(_Event):
    """The question of pause ``pause_id`` was answered ``by`` a ``person`` (``answer``) or ended
    by the ``timeout`` (no answer: the question fails, the job goes on)."""

    type: Literal["question_answered"] = "question_answered"
    round: int
    pause_id: str = ""
    by: str = "person"
    call_index: int = 0
    answer: Any = None


class ChildrenSpawned(_Event):
    """Call ``call_index`` of round ``round`` started child jobs ``children`` (their ids, in
    order) and the job waits for them (state ``waiting_for_children``) until ``wait`` holds:
    ``all`` ended, ``any`` did, or that many did (docs/children.md)."""

    type: Literal["children_spawned"] = "children_spawned"
    round: int
    call_index: int = 0
    children: list[str] = Field(default_factory=list)
    wait: str = "all"


class ChildEnded(_Event):
    """Child job ``child_id`` of this job ended with ``status`` (``error`` when it did not
    complete); a child's failure is its outcome, not this job's."""

    type: Literal["child_ended"] = "child_ended"
    child_id: str
    status: str
    error: str | None = None


class MessageReceived(_Event):
    """A person's message (``tandem.message``, redacted) was stored; the job's leading model (the
    Thinker of a dual job, the Actor otherwise) reads it at the start of round ``round``."""

    type: Literal["message_received"] = "message_received"
    message_id: str
    round: int
    text: str = ""


class MemoryCompacted(_Event):
    """The ``role``'s view compacted for its request of round ``round``: rounds
    ``summary_of_rounds`` (first and last, from 0) are ``summarized`` (a summary entry, stored
    beside the originals, stands in for them; ``rounds_summarized``: how many of them this summary
    read itself, the rest came through the previous one) or ``dropped`` (a marker stands in for
    them; ``rounds_dropped`` repeats them). ``tokens_before`` and ``tokens_after``: the request's
    tokens without and with the compaction. The originals stay in the memory."""

    type: Literal["memory_compacted"] = "memory_compacted"
    round: int
    role: str
    tokens_before: int
    tokens_after: int
    summary_of_rounds: list[int] = Field(default_factory=list)
    rounds_summarized: int = 0
    rounds_dropped: list[int] = Field(default_factory=list)
    how: str = "dropped"

    @property
    def rounds(self) -> list[int]:
        """The rounds compacted, ``[first, last]`` (``rounds_dropped`` for an event written
        before ``summary_of_rounds`` existed)."""
        return self.summary_of_rounds or self.rounds_dropped


class Final(_Event):
    """The job ended; the fields are the ``JobResult``'s. Always the stream's last event."""

    type: Literal["final"] = "final"
    job_id: str = ""
    status: str
    deliverable: str = ""
    rounds: int = 0
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
    children: list[str] = Field(default_factory=list)

    def result(self) -> JobResult:
        """The event as a ``JobResult`` (``tandem.tasks.spec``: the direct client's install)."""
        from tandem.tasks.spec import JobResult

        return JobResult.model_validate(self.data)

    @classmethod
    def of(cls, result: JobResult) -> Final:
        """The ``final`` event of ``result``."""
        return cls.model_validate(result.model_dump(mode="json"))


class WebhookDelivered(_Event):
    """Attempt ``attempt`` of webhook delivery ``delivery_id`` (its ``event``: ``final`` or
    ``waiting_for_person``) got a 2xx answer (``status_code``) from ``url`` (scheme, host, port and
    path only). A delivery for ``final`` is written after the ``final`` event."""

    type: Literal["webhook_delivered"] = "webhook_delivered"
    delivery_id: str
    event: str
    url: str
    attempt: int
    status_code: int


class WebhookFailed(_Event):
    """Attempt ``attempt`` of webhook delivery ``delivery_id`` failed: ``status_code`` (``None``: no
    answer) and ``error`` say how. ``retry_at`` (Unix time) is when the next attempt is due;
    ``None``: the delivery was given up (its last attempt, or a host this worker may not reach)."""

    type: Literal["webhook_failed"] = "webhook_failed"
    delivery_id: str
    event: str
    url: str
    attempt: int
    status_code: int | None = None
    error: str = ""
    retry_at: float | None = None


class OtherEvent(_Event):
    """An event of a kind this version does not know (written by a newer version); fields kept."""

    type: str


KnownEvent = Annotated[
    JobStarted
    | RoundStarted
    | ModelDelta
    | ModelReply
    | ToolCall
    | ToolResult
    | Waiting
    | ApprovalRequested
    | ApprovalDecided
    | QuestionAsked
    | QuestionAnswered
    | WebhookDelivered
    | WebhookFailed
    | MessageReceived
    | MemoryCompacted
    | ChildrenSpawned
    | ChildEnded
    | Final,
    Field(discriminator="type"),
]
JobEvent = KnownEvent | OtherEvent
"""Any entry of a job's event stream."""

EVENT_TYPES: tuple[str, ...] = (
    "job_started",
    "round_started",
    "model_delta",
    "model_reply",
    "tool_call",
    "tool_result",
    "waiting",
    "approval_requested",
    "approval_decided",
    "question_asked",
    "question_answered",
    "webhook_delivered",
    "webhook_failed",
    "message_received",
    "memory_compacted",
    "children_spawned",
    "child_ended",
    "final",
)
EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(KnownEvent)
"""Validates a known event's dict (its ``type`` picks the model)."""


def read_event(entry_id: str, kind: str, data: dict[str, Any], at: float = 0.0) -> JobEvent:
    """The typed event of one stream entry; never fails (an unreadable one is an ``OtherEvent``)."""
    fields = {k: v for k, v in data.items() if k not in ENVELOPE}
    if kind in EVENT_TYPES:
        try:
            envelope = {"type": kind, "id": entry_id, "at": at}
            event: JobEvent = EVENT_ADAPTER.validate_python({**fields, **envelope})
            return event
        except ValidationError:
            pass  # a writer of another version: keep what is there
    return OtherEvent.model_validate({**fields, "type": kind, "id": entry_id, "at": at})


def event_from_json(payload: dict[str, Any]) -> JobEvent:
    """The typed event of its flat JSON form (``id``, ``type``, ``at`` and its fields: the API's SSE
    ``data``); never fails (an unreadable one is an ``OtherEvent``)."""
    fields = {k: v for k, v in payload.items() if k not in ENVELOPE}
    try:
        at = float(payload.get("at") or 0.0)
    except (TypeError, ValueError):
        at = 0.0
    return read_event(str(payload.get("id", "")), str(payload.get("type", "")), fields, at)


__all__ = [
    "ENVELOPE",
    "EVENT_ADAPTER",
    "EVENT_TYPES",
    "ApprovalDecided",
    "ApprovalRequested",
    "ArtifactInfo",
    "ChildEnded",
    "ChildrenSpawned",
    "Final",
    "JobEvent",
    "JobStarted",
    "KnownEvent",
    "MemoryCompacted",
    "MessageReceived",
    "ModelDelta",
    "ModelReply",
    "OtherEvent",
    "QuestionAnswered",
    "QuestionAsked",
    "RoundStarted",
    "ToolCall",
    "ToolResult",
    "Waiting",
    "WebhookDelivered",
    "WebhookFailed",
    "event_from_json",
    "read_event",
]
