"""What crosses the wire for a job: ``JobSpec`` in, ``JobStatus`` while it runs, ``JobResult`` out."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tandem.broker_config.settings import Limits
from tandem.broker_config.tokens import DEFAULT_TENANT, check_tenant
from tandem.reasoner.approval import PendingCall
from tandem.reasoner.messages import Usage
from tandem.tasks.errors import JobSpecError, SpecLimitError
from tandem.tasks.sealing import is_sealed
from tandem.tasks.webhooks.targets import MAX_WEBHOOKS, Webhook, shown_url
from tandem.toolkit.redaction import MASK

ReasonerKind = Literal["dual", "mono", "react"]
JobState = Literal[
    "queued",
    "running",
    "waiting",
    "awaiting_approval",
    "waiting_for_children",
    "completed",
    "truncated",
    "failed",
    "cancelled",
]
FINAL_STATES: frozenset[str] = frozenset({"completed", "truncated", "failed", "cancelled"})
MAX_SECRET_CHARS = 8192
MAX_SEALED_CHARS = 48_000
"""The longest sealed value: a secret of ``MAX_SECRET_CHARS`` characters of up to four UTF-8 bytes
each, sealed (Fernet, base64); a value sealed by a worker must pass the worker's own check."""
_SECRET_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}")


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
    owner: str = Field(
        default=DEFAULT_TENANT,
        description="The tenant that owns the job: only its tokens read or control it, and its sealed "
        "secrets unseal only in its jobs. Set by the API from the token; 'default' without tenants.",
    )
    secrets: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="Per-job credentials for tools, by name: injected into tools only (ToolCallContext."
        "secrets), sealed at rest with TANDEM_SECRETS_KEY, never shown to a model or in events.",
    )

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str) -> str:
        return check_tenant(value)

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, secret in value.items():
            if not _SECRET_NAME.fullmatch(name):
                raise ValueError(f"secret name {name!r} must be letters, digits, '_' or '-' (at most 64)")
            if len(secret) > (MAX_SEALED_CHARS if is_sealed(secret) else MAX_SECRET_CHARS):
                raise ValueError(f"secret {name!r} is longer than {MAX_SECRET_CHARS} characters")
        return value

    def public_dump(self) -> dict[str, Any]:
        """The spec as JSON data with every secret value replaced by ``***`` and webhook URLs cut to
        scheme, host, port and path (a receiver's credentials may sit in the rest): for events, logs,
        displays."""
        data = self.model_dump(mode="json")
        data["secrets"] = dict.fromkeys(self.secrets, MASK)
        for hook in data["webhooks"]:
            hook["url"] = shown_url(hook["url"])
        return data

    def __repr_args__(self) -> Any:
        return [(k, v) for k, v in super().__repr_args__() if k != "secrets"]

    approve_tools: list[str] | Literal["all"] = Field(
        default_factory=list,
        description="Tools whose calls wait for a person's decision, on top of those declaring "
        "requires_approval; 'all' for every tool.",
    )
    approval_timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=30 * 86400,
        description="Seconds a call may wait for a decision; none in time counts as a rejection.",
    )

    ask_person: bool = Field(
        default=False,
        description="Offer the model the built-in ask_person tool: a question to a person, answered "
        "through tandem.answer while the job is parked (docs/questions.md).",
    )
    answer_timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=30 * 86400,
        description="Seconds a question waits for its answer (none: TANDEM_MEMORY_TTL); none in time "
        "fails the question with 'no answer within N s' and the job goes on.",
    )

    @field_validator("approve_tools", mode="before")
    @classmethod
    def _approve_tools(cls, value: Any) -> Any:
        from tandem.reasoner.approval import validate_approve_tools

        return validate_approve_tools(value)

    max_tokens_total: int | None = Field(
        default=None, ge=1, description="Token budget of the whole job; it ends truncated once spent."
    )
    max_cost_usd: float | None = Field(
        default=None, gt=0, description="Cost budget in USD (LiteLLM's cost map); ends the job once spent."
    )
    priority: int = Field(
        default=5,
        ge=0,
        le=9,
        description="0 (least urgent) to 9 (most urgent): queued steps of more urgent jobs are taken first.",
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=30 * 86400,
        description="Seconds the job may take before it fails; None: TANDEM_JOB_TIMEOUT (3600 s).",
    )

    webhooks: list[Webhook] = Field(
        default_factory=list,
        max_length=MAX_WEBHOOKS,
        description="URLs told of the job's end ('final') and of its pauses for a person "
        "('waiting_for_person') by a signed JSON POST, retried with back-off (docs/webhooks.md).",
    )

    thread_id: str | None = Field(
        default=None,
        max_length=256,
        pattern=r"^[^\x00-\x20{}\x7f]+$",
        description="The conversation thread the job belongs to (GET /v1/threads/{id}): a follow-up "
        "names its thread; None: the job starts its own, whose id is the job's id (docs/conversation.md).",
    )

    parent_id: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,  # a spec of no parent reads as before (docs/upgrades.md)
        max_length=256,
        description="The job that started this one as a child (ToolCallContext.spawn, spawn_jobs); set by "
        "the parent's worker, never by a client (docs/children.md).",
    )

    trace_context: dict[str, str] | None = Field(
        default=None,
        description="The W3C trace context (traceparent, tracestate) of the job's trace; set by submit "
        "or the intake when tracing is on (docs/tracing.md).",
    )

    @field_validator("trace_context")
    @classmethod
    def _trace_context(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, text in (value or {}).items():
            if key not in ("traceparent", "tracestate"):
                raise ValueError(f"trace_context holds {key!r}: only 'traceparent' and 'tracestate' are kept")
            if len(text) > 512:
                raise ValueError(f"trace_context {key!r} is longer than 512 characters")
        return value

    @field_validator("goal")
    @classmethod
    def _goal_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the goal is blank: say what the job must achieve")
        return value


def _depth_over(value: Any, limit: int) -> bool:
    """True when ``value`` nests deeper than ``limit`` lists/objects (iterative: no recursion to blow)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth + 1 > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _at_least_bytes(value: Any, limit: int) -> int:
    """A lower bound of ``value``'s JSON size, walked without recursion; the walk stops once the
    bound passes ``limit`` (so a 70 MB spec costs a few string lengths, not a 70 MB ``dumps``)."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, dict):
            total += 2
            for k, v in item.items():
                total += (len(k) if isinstance(k, str) else 1) + 3
                stack.append(v)
        elif isinstance(item, list | tuple):
            total += 2 + len(item)
            stack.extend(item)
        else:
            total += 1
        if total > limit:
            return total
    return total


def _json_size(value: Any, what: str) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise JobSpecError(f"{what} is not plain JSON data ({type(exc).__name__}: {exc})"[:300]) from None


def check_limits(raw: dict[str, Any], limits: Limits) -> None:
    """Refuse a raw spec over a size or depth limit (``SpecLimitError`` naming the limit and its
    variable); done before any other parsing, so a hostile spec costs a walk and one ``dumps``."""
    # The spec's own fields nest 2 deep (a list of names); metadata gets its limit on top.
    if _depth_over(raw, limits.metadata_depth + 1):
        raise SpecLimitError(
            f"the spec nests deeper than {limits.metadata_depth} levels inside 'metadata' (or a field "
            f"nests where it should not): flatten it (limit TANDEM_MAX_METADATA_DEPTH="
            f"{limits.metadata_depth})"
        )
    size = _at_least_bytes(raw, limits.spec_bytes)
    if size <= limits.spec_bytes:
        size = _json_size(raw, "the spec")
    if size > limits.spec_bytes:
        raise SpecLimitError(
            f"the spec is at least {size} bytes of JSON, over the limit of {limits.spec_bytes} "
            "(TANDEM_MAX_SPEC_BYTES): pass large inputs by reference (a URL or a key a tool can read)"
        )
    for field_name, limit, var in (
        ("goal", limits.goal_chars, "TANDEM_MAX_GOAL_CHARS"),
        ("context", limits.context_chars, "TANDEM_MAX_CONTEXT_CHARS"),
    ):
        value = raw.get(field_name)
        if isinstance(value, str) and len(value) > limit:
            raise SpecLimitError(
                f"field {field_name!r} has {len(value)} characters, over the limit of {limit} ({var})"
            )
    metadata = raw.get("metadata")
    if metadata is not None:
        meta_size = _at_least_bytes(metadata, limits.metadata_bytes)
        if meta_size <= limits.metadata_bytes:
            meta_size = _json_size(metadata, "field 'metadata'")
        if meta_size > limits.metadata_bytes:
            raise SpecLimitError(
                f"field 'metadata' is at least {meta_size} bytes of JSON, over the limit of "
                f"{limits.metadata_bytes} "
                "(TANDEM_MAX_METADATA_BYTES): keep metadata to labels and ids"
            )
    secrets = raw.get("secrets")
    if isinstance(secrets, dict) and len(secrets) > limits.secrets:
        raise SpecLimitError(
            f"field 'secrets' has {len(secrets)} entries, over the limit of {limits.secrets} "
            "(TANDEM_MAX_SECRETS)"
        )


def validate_spec(raw: JobSpec | dict[str, Any], limits: Limits | None = None) -> JobSpec:
    """A ``JobSpec`` from a dict; ``JobSpecError`` naming the field and the reason if invalid,
    ``SpecLimitError`` naming the limit and its setting if too big or too deep (``limits``, default
    ``Limits()``)."""
    limits = limits or Limits()
    if isinstance(raw, JobSpec):
        check_limits(raw.model_dump(mode="json"), limits)
        return raw
    if not isinstance(raw, dict):
        raise JobSpecError(f"a job spec must be a JSON object, got {type(raw).__name__}")
    check_limits(raw, limits)
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(spec)"
            reason = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            shown = MASK if where.startswith("secrets") else _short(err.get("input"))
            problems.append(f"field {where!r}: {reason} (got {shown})"[:300])
        raise JobSpecError("invalid job spec: " + "; ".join(problems)) from None


class Waiting(BaseModel):
    """What a job's next step waits for (a model host's capacity), and until when."""

    reason: str = Field(description="in_flight, rpm, tpm, backoff or probe")
    host: str
    until: float = Field(description="When the step is tried again (seconds since the epoch).")
    detail: str = ""


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 120 else text[:117] + "..."


class JobStatus(BaseModel):
    """Where a job stands, kept in Redis and updated by every step."""

    job_id: str
    state: JobState = "queued"
    reasoner: ReasonerKind = "dual"
    owner: str = DEFAULT_TENANT
    """The tenant that owns the job (``JobSpec.owner``)."""
    round: int = 0
    step: str = ""
    error: str | None = None
    updated_at: float = 0.0
    waiting: Waiting | None = None
    """Set while the step waits for a model host's capacity; cleared by the next update."""
    waiting_for: str | None = None
    """While ``waiting``: what the job waits for (a model host's back-off, a transient error)."""
    until: float | None = None
    """While ``waiting``: when the step is sent again (Unix time)."""
    epoch: int = 0
    """How many times a worker took the current job's steps (grows at every claim)."""
    deadline: float | None = None
    """When the job fails if it has not ended (Unix time). While ``awaiting_approval`` it is pushed
    back by the longest wait; once decided it is the original deadline plus the time waited."""
    pending_approval: list[PendingCall] | None = None
    """While ``awaiting_approval``: the calls still waiting for a decision (index, tool, args,
    objective), as ``tandem approve`` / ``JobHandle.decide`` name them."""
    pause_id: str | None = None
    """While ``awaiting_approval``: the id of the pause, which a decision names (see docs/approvals.md)."""
    approval_until: float | None = None
    """While ``awaiting_approval``: when the undecided calls are rejected (Unix time), or, for a
    question, when it fails unanswered."""
    pause_kind: Literal["approval", "question", "children"] | None = None
    """While ``awaiting_approval``: what the person is asked for, a decision on calls or an answer."""
    question: dict[str, Any] | None = None
    """While ``awaiting_approval`` on a question: its ``text``, ``answer_schema``, ``round``,
    ``call_index`` and ``tool`` (see docs/questions.md)."""


class JobResult(BaseModel):
    """How a job ended: the result of ``tandem.infer`` (as a JSON dict) and of ``JobHandle.result``."""

    job_id: str
    status: Literal["completed", "truncated", "failed", "cancelled"]
    owner: str = DEFAULT_TENANT
    """The tenant that owns the job (``JobSpec.owner``; for a spec refused at intake, the one it named)."""
    deliverable: str = ""
    rounds: int = 0
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
    children: list[str] = Field(default_factory=list)
    """The ids of the child jobs this job started (``ToolCallContext.spawn``), in order."""
