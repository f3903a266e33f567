"""``Settings``: every environment variable tandem reads, read once and validated here.

Nothing else in tandem calls ``os.getenv``: the rest receives these values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from tandem.broker_config.api_settings import ApiSettings
from tandem.broker_config.child_settings import ChildSettings
from tandem.broker_config.compaction_settings import CompactionSettings
from tandem.broker_config.errors import SettingsError
from tandem.broker_config.intake_lanes import read_intake
from tandem.broker_config.job_redis import read_urls, refuse_cluster
from tandem.broker_config.sentinel import SentinelUrl, is_sentinel_url
from tandem.broker_config.signing import Signing, read_signing
from tandem.broker_config.tokens import read_tokens
from tandem.broker_config.webhook_settings import WebhookSettings
from tandem.reasoner.host_auth import api_base_refusal
from tandem.reasoner.tool_choice import DEFAULT_TOOL_CHOICE, TOOL_CHOICES

DEFAULT_URL = "redis://127.0.0.1:6379/0"
ROLE_NAMES = ("thinker", "actor")
RoleName = Literal["thinker", "actor"]
DEFAULT_MAX_TOKENS: dict[str, int] = {"thinker": 8192, "actor": 4096}
"""What a role's model may write per reply when ``TANDEM_<ROLE>_MAX_TOKENS`` is unset (``0`` = no cap)."""


def _number(
    env: Mapping[str, str], name: str, default: float | None, *, minimum: float = 0.0
) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number: set it to a number such as 30") from None
    if not math.isfinite(value):  # float() accepts "nan" and "inf"; no setting means either
        raise SettingsError(f"{name}={raw!r} is not a finite number: set it to a number such as 30")
    if value < minimum:
        raise SettingsError(f"{name}={raw!r} must be at least {minimum:g}")
    return value


def _integer(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(
            f"{name}={raw!r} is not a whole number: set it to e.g. {max(default, minimum)}"
        ) from None
    if value < minimum:
        raise SettingsError(f"{name}={raw!r} must be at least {minimum}")
    return value


def visibility_timeout(task_time_limit: float, lease_seconds: float) -> int:
    """The Redis broker's visibility timeout: how long an unacknowledged message waits before it is
    handed out again. Above a step's hard time limit and four leases, so that a step still running
    is never handed out twice (``Settings.visibility_timeout``)."""
    return int(task_time_limit + 4 * lease_seconds + 60)


def _memory_ttl(env: Mapping[str, str], broker: str, task_time_limit: float, lease_seconds: float) -> int:
    """``TANDEM_MEMORY_TTL``, at least the Redis broker's visibility timeout (unset: a day, or that
    timeout when longer). An intake message whose worker died unacknowledged is handed out again after
    that timeout; it must still find its job's record, or it would create the job anew and run it
    twice."""
    visibility = visibility_timeout(task_time_limit, lease_seconds)
    redis_broker = broker.startswith("redis")  # redis, rediss, redis+socket
    if not env.get("TANDEM_MEMORY_TTL", "").strip():
        return max(86400, visibility) if redis_broker else 86400
    ttl = _integer(env, "TANDEM_MEMORY_TTL", 86400, minimum=60)
    if redis_broker and ttl < visibility:
        raise SettingsError(
            f"TANDEM_MEMORY_TTL={ttl} is below the Redis broker's visibility timeout of {visibility} s "
            f"(TANDEM_TASK_TIME_LIMIT={task_time_limit:g} + 4 x TANDEM_LEASE_SECONDS={lease_seconds:g} "
            f"+ 60): an intake message handed out again after that timeout would find its job's keys "
            f"expired and run the job a second time; set TANDEM_MEMORY_TTL to at least {visibility}"
        )
    return ttl


def _optional_integer(env: Mapping[str, str], name: str, minimum: int = 1) -> int | None:
    """A whole number of at least ``minimum``, or ``None`` when the variable is unset or empty."""
    if not env.get(name, "").strip():
        return None
    return _integer(env, name, minimum, minimum=minimum)


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}={raw!r} is not a yes/no value: use true or false, or leave it unset")


MIN_CONTEXT_TOKENS = 256
"""The shortest context window a role may be given: less holds no prompt and reply."""


def _function_calling(env: Mapping[str, str], name: str) -> Literal["native", "prompt"] | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if raw in ("native", "prompt"):
        return raw  # type: ignore[return-value]
    raise SettingsError(
        f"{name}={raw!r} must be 'native' (tools= in the request) or 'prompt' (<function_call> blocks)"
    )


def _tool_choice(env: Mapping[str, str], name: str) -> str:
    raw = env.get(name, "").strip() or DEFAULT_TOOL_CHOICE
    if raw not in TOOL_CHOICES:
        raise SettingsError(
            f"{name}={raw!r} must be one of {', '.join(TOOL_CHOICES)} (the tool_choice sent with tools; "
            "'omit' sends none)"
        )
    return raw


def _secrets_key(env: Mapping[str, str]) -> str | None:
    raw = env.get("TANDEM_SECRETS_KEY", "").strip()
    if not raw:
        return None
    import base64
    import binascii

    try:
        ok = len(base64.urlsafe_b64decode(raw.encode())) == 32
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise SettingsError(
            "TANDEM_SECRETS_KEY is not a Fernet key (32 url-safe base64-encoded bytes): make one with "
            "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
        )
    return raw


def _metrics_port(env: Mapping[str, str]) -> int | None:
    if not env.get("TANDEM_METRICS_PORT", "").strip():
        return None
    port = _integer(env, "TANDEM_METRICS_PORT", 9808, minimum=0)
    if port > 65535:
        raw = env["TANDEM_METRICS_PORT"].strip()
        raise SettingsError(
            f"TANDEM_METRICS_PORT={raw!r} is not a TCP port: use 1-65535, or 0 for any free one"
        )
    return port


def _queue_type(env: Mapping[str, str], broker: str) -> Literal["classic", "quorum"]:
    raw = env.get("TANDEM_RABBITMQ_QUEUE_TYPE", "").strip() or "classic"
    if raw not in ("classic", "quorum"):
        raise SettingsError(f"TANDEM_RABBITMQ_QUEUE_TYPE={raw!r} must be 'classic' or 'quorum' (replicated)")
    if raw == "quorum" and not broker.startswith(("amqp://", "pyamqp://")):
        raise SettingsError(
            f"TANDEM_RABBITMQ_QUEUE_TYPE={raw!r} needs a RabbitMQ broker: set TANDEM_BROKER_URL to an "
            "amqp:// URL, or leave TANDEM_RABBITMQ_QUEUE_TYPE unset (quorum queues are RabbitMQ's)"
        )
    return raw  # type: ignore[return-value]


def _burst_seconds(env: Mapping[str, str]) -> float:
    burst = _number(env, "TANDEM_RATE_BURST_SECONDS", 1.0, minimum=0.0) or 0.0
    if burst > 30:  # the pace is the limit less the burst: past half a minute it starves
        raw = env["TANDEM_RATE_BURST_SECONDS"].strip()
        raise SettingsError(f"TANDEM_RATE_BURST_SECONDS={raw!r} must be at most 30 (seconds of the limit)")
    return burst


@dataclass(frozen=True)
class RoleSettings:
    """The model of one role (``TANDEM_<ROLE>_*``); ``model=None`` means the offline demo model."""

    role: RoleName
    model: str | None = None
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    reasoning_parser: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float = 120.0
    """Seconds one model call may take, all its attempts and the waits between them included."""
    thinking: bool | None = None
    function_calling: Literal["native", "prompt"] | None = None
    """How ReAct jobs ask for tools: the host's native tool calls, or ``<function_call>`` blocks."""
    max_in_flight: int | None = None
    """Fleet-wide cap on concurrent calls to this role's model host (``None``: no cap)."""
    rpm: int | None = None
    """Fleet-wide requests per minute to this role's model host (``None``: no budget)."""
    tpm: int | None = None
    """Fleet-wide tokens per minute to this role's model host (``None``: no budget)."""
    stream: bool = False
    """Ask the host for a streamed reply, so its tokens reach the job's events as they come."""
    tool_choice: str = "auto"
    """The ``tool_choice`` sent whenever a request offers tools (``"omit"``: none is sent)."""
    context_tokens: int | None = None
    """The model's context window in tokens (``None``: as the host or LiteLLM's model map says)."""

    @classmethod
    def from_env(cls, role: RoleName, env: Mapping[str, str]) -> RoleSettings:
        """Read ``TANDEM_<ROLE>_MODEL``, ``_API_BASE``, ``_API_KEY``, ``_REASONING_PARSER``,
        ``_TEMPERATURE``, ``_MAX_TOKENS``, ``_TIMEOUT``, ``_THINKING``, ``_FUNCTION_CALLING``,
        ``_STREAM``, ``_TOOL_CHOICE``, ``_CONTEXT_TOKENS`` and the fleet-wide capacity of the role's
        host: ``_MAX_IN_FLIGHT``, ``_RPM``, ``_TPM``."""
        p = f"TANDEM_{role.upper()}_"
        parser = env.get(f"{p}REASONING_PARSER", "").strip() or None
        if parser is not None:
            from tandem.reasoner.parsing import REASONING_PARSERS

            if parser not in REASONING_PARSERS:
                raise SettingsError(
                    f"{p}REASONING_PARSER={parser!r} is not a known parser; use one of "
                    f"{', '.join(REASONING_PARSERS)}"
                )
        temperature = _number(env, f"{p}TEMPERATURE", None)
        if temperature is not None and temperature > 2:
            raise SettingsError(f"{p}TEMPERATURE={env[f'{p}TEMPERATURE'].strip()!r} must be between 0 and 2")
        api_base = env.get(f"{p}API_BASE", "").strip() or None
        api_key = env.get(f"{p}API_KEY", "").strip() or None
        if refused := api_base_refusal(api_base, api_key, f"{p}API_BASE", f"{p}API_KEY"):
            raise SettingsError(refused)
        return cls(
            role=role,
            model=env.get(f"{p}MODEL", "").strip() or None,
            api_base=api_base,
            api_key=api_key,
            reasoning_parser=parser,
            temperature=temperature,
            max_tokens=(
                _integer(env, f"{p}MAX_TOKENS", DEFAULT_MAX_TOKENS[role], minimum=0)
                if env.get(f"{p}MAX_TOKENS", "").strip()
                else None
            ),
            timeout=_number(env, f"{p}TIMEOUT", 120.0, minimum=1.0) or 120.0,
            thinking=_flag(env, f"{p}THINKING"),
            function_calling=_function_calling(env, f"{p}FUNCTION_CALLING"),
            max_in_flight=_optional_integer(env, f"{p}MAX_IN_FLIGHT"),
            rpm=_optional_integer(env, f"{p}RPM"),
            tpm=_optional_integer(env, f"{p}TPM"),
            stream=bool(_flag(env, f"{p}STREAM")),
            tool_choice=_tool_choice(env, f"{p}TOOL_CHOICE"),
            context_tokens=_optional_integer(env, f"{p}CONTEXT_TOKENS", MIN_CONTEXT_TOKENS),
        )

    @property
    def reply_tokens(self) -> int | None:
        """The cap on one reply: ``max_tokens``, else the role's default (``DEFAULT_MAX_TOKENS``);
        ``None`` (no cap) when ``TANDEM_<ROLE>_MAX_TOKENS=0``."""
        if self.max_tokens is None:
            return DEFAULT_MAX_TOKENS[self.role]
        return self.max_tokens or None

    @property
    def is_demo(self) -> bool:
        """True when no model is configured and the offline demo model stands in."""
        return self.model is None

    @property
    def host_id(self) -> str:
        """The host as limits and metrics name it: ``API_BASE`` (password masked), the model, or ``demo``."""
        if self.api_base:
            from tandem.toolkit.redaction import masked_url  # (lazily: the toolkit takes 0.5 s)

            return masked_url(self.api_base.rstrip("/"))
        return self.model or "demo"

    @property
    def limited(self) -> bool:
        """True when any fleet-wide capacity limit is set for this role."""
        return any(v is not None for v in (self.max_in_flight, self.rpm, self.tpm))


@dataclass(frozen=True)
class Limits:
    """Bounds on every input a job brings; each error that enforces one names it and its variable.

    ``0`` is never "unlimited" here: every limit has a sensible default (docs/security.md, "Limits").
    """

    spec_bytes: int = 1_000_000
    """``TANDEM_MAX_SPEC_BYTES``: a spec's JSON size; a bigger one is refused at submit."""
    goal_chars: int = 100_000
    """``TANDEM_MAX_GOAL_CHARS``: characters of ``goal``."""
    context_chars: int = 400_000
    """``TANDEM_MAX_CONTEXT_CHARS``: characters of ``context``."""
    metadata_bytes: int = 64_000
    """``TANDEM_MAX_METADATA_BYTES``: ``metadata``'s JSON size."""
    metadata_depth: int = 16
    """``TANDEM_MAX_METADATA_DEPTH``: how deep ``metadata`` (and the whole spec) may nest."""
    secrets: int = 32
    """``TANDEM_MAX_SECRETS``: entries of ``secrets`` (each value at most 8 KB)."""
    tool_calls: int = 16
    """``TANDEM_MAX_TOOL_CALLS``: tool calls run per reply; the rest get a FAILED result naming the cap."""
    tool_args_bytes: int = 64_000
    """``TANDEM_MAX_TOOL_ARGS_BYTES``: one call's arguments as JSON; bigger calls are not run."""
    memory_bytes: int = 20_000_000
    """``TANDEM_MAX_MEMORY_BYTES``: a job's conversation; past it the job ends ``failed``, memory kept."""
    hung_tools: int = 16
    """``TANDEM_MAX_HUNG_TOOLS``: tool threads past their timeout a process tolerates before it
    refuses to start more (restart the worker to get them back)."""
    description_chars: int = 1000
    """``TANDEM_MAX_TOOL_DESCRIPTION_CHARS``: a tool's (e.g. an MCP server's) description in prompts."""
    thread_chars: int = 20_000
    """``TANDEM_MAX_THREAD_CHARS``: the earlier jobs of its thread a follow-up reads (oldest dropped)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        """Read the ``TANDEM_MAX_*`` variables (each a whole number of at least 1)."""
        d = cls()
        return cls(
            spec_bytes=_integer(env, "TANDEM_MAX_SPEC_BYTES", d.spec_bytes, minimum=1024),
            goal_chars=_integer(env, "TANDEM_MAX_GOAL_CHARS", d.goal_chars, minimum=1),
            context_chars=_integer(env, "TANDEM_MAX_CONTEXT_CHARS", d.context_chars, minimum=1),
            metadata_bytes=_integer(env, "TANDEM_MAX_METADATA_BYTES", d.metadata_bytes, minimum=2),
            metadata_depth=_integer(env, "TANDEM_MAX_METADATA_DEPTH", d.metadata_depth, minimum=1),
            secrets=_integer(env, "TANDEM_MAX_SECRETS", d.secrets, minimum=0),
            tool_calls=_integer(env, "TANDEM_MAX_TOOL_CALLS", d.tool_calls, minimum=1),
            tool_args_bytes=_integer(env, "TANDEM_MAX_TOOL_ARGS_BYTES", d.tool_args_bytes, minimum=2),
            memory_bytes=_integer(env, "TANDEM_MAX_MEMORY_BYTES", d.memory_bytes, minimum=10_000),
            hung_tools=_integer(env, "TANDEM_MAX_HUNG_TOOLS", d.hung_tools, minimum=1),
            description_chars=_integer(
                env, "TANDEM_MAX_TOOL_DESCRIPTION_CHARS", d.description_chars, minimum=50
            ),
            thread_chars=_integer(env, "TANDEM_MAX_THREAD_CHARS", d.thread_chars, minimum=100),
        )


def _wait_timeout(env: Mapping[str, str]) -> int:
    timeout = _integer(env, "TANDEM_REDIS_WAIT_TIMEOUT_MS", 1000, minimum=1)
    socket = _number(env, "TANDEM_REDIS_SOCKET_TIMEOUT", 30.0, minimum=2.0) or 30.0
    if timeout >= socket * 1000:  # a wait that long would be cut as a lost connection
        limit = f"under TANDEM_REDIS_SOCKET_TIMEOUT ({socket:g} s): write fewer milliseconds"
        raise SettingsError(f"TANDEM_REDIS_WAIT_TIMEOUT_MS={timeout!r} is not {limit}")
    return timeout


@dataclass(frozen=True)
class Settings:
    """All of tandem's configuration. Build it with ``Settings.from_env()``.

    ``lease_seconds`` bounds how long a step whose worker died waits before another worker takes
    it over; ``task_time_limit`` is the hard limit of one step, and the broker's visibility
    timeout is set above it so Redis never hands out a step that is still running.
    ``stall_seconds`` is how long a job may go without progress and without a live lease before
    the reconciler sends its current step again; ``job_timeout`` is a job's default deadline
    (``JobSpec.timeout_s``); ``max_lease_expiries`` is how often one step may lose its worker
    before the job fails.
    """

    broker_url: str = DEFAULT_URL
    result_backend: str = DEFAULT_URL
    redis_url: str = DEFAULT_URL
    toolkit: str | None = None
    intake_queue: str = "celery"
    intake_lanes: int = 0  # TANDEM_INTAKE_LANES: lanes of the intake queue (``intake_lanes.IntakeLanes``)
    thinker: RoleSettings = field(default_factory=lambda: RoleSettings("thinker"))
    actor: RoleSettings = field(default_factory=lambda: RoleSettings("actor"))
    task_time_limit: float = 900.0
    lease_seconds: float = 30.0
    stall_seconds: float = 60.0
    job_timeout: float = 3600.0
    max_lease_expiries: int = 5
    result_expires: int = 86400
    memory_ttl: int = 86400
    tool_timeout: float = 60.0
    max_output_chars: int = 8000
    """``TANDEM_MAX_OUTPUT_CHARS``: the most characters of one tool output (or one ``read_artifact``
    page) the model reads."""
    artifact_bytes: int = 8000
    """``TANDEM_ARTIFACT_BYTES``: a longer tool output (UTF-8 bytes) is kept whole as an artifact and the
    model reads a preview and its handle (``tandem.reasoner.artifacts``); 0: never. At or below
    ``max_output_chars`` (the default), no output is ever lost past the cut."""
    prefix: str = "tandem"
    limits: Limits = field(default_factory=Limits)
    tool_policy: str | None = None
    """``TANDEM_TOOL_POLICY``: the tool policy as JSON/YAML text or a file path (overrides the toolkit's)."""
    redis_socket_timeout: float = 30.0
    """``TANDEM_REDIS_SOCKET_TIMEOUT``: seconds a Redis read or write may wait (broker, backend, store)."""
    redis_connect_timeout: float = 10.0
    """``TANDEM_REDIS_CONNECT_TIMEOUT``: seconds to open a Redis connection."""
    secrets_key: str | None = field(default=None, repr=False)
    """``TANDEM_SECRETS_KEY``: the Fernet key that seals ``JobSpec.secrets`` at rest."""
    signing: Signing | None = None
    redis_max_connections: int | None = None
    """Size of each worker process's Redis connection pool; ``None``: sized from its concurrency."""
    redis_pool_timeout: float = 20.0
    """Seconds a thread waits for a free Redis connection before ``ConnectionError``."""
    redis_wait_replicas: int = 0
    """``TANDEM_REDIS_WAIT_REPLICAS``: replicas the writes that must survive a failover wait for
    (``WAIT``; 0: none); ``redis_wait_timeout_ms`` the longest wait (``tandem.tasks.state.replicas``)."""
    redis_wait_timeout_ms: int = 1000
    metrics_port: int | None = None
    """Port of the worker's Prometheus ``/metrics`` endpoint; ``None``: no endpoint."""
    events_maxlen: int = 10000  # TANDEM_EVENTS_MAXLEN: about how many entries a job's event stream keeps
    deltas: bool = True  # TANDEM_EVENT_DELTAS: publish ``model_delta`` events (live tokens)
    compaction: CompactionSettings = field(default_factory=CompactionSettings)  # TANDEM_COMPACT_AT, ...
    delta_interval_ms: int = 100
    """``TANDEM_DELTA_INTERVAL_MS``: a reply's deltas are published at most this often..."""
    delta_max_chars: int = 512
    """``TANDEM_DELTA_MAX_CHARS``: ...or as soon as this many characters wait."""
    api_tokens: tuple[str, ...] = field(default=(), repr=False)
    """``TANDEM_API_TOKENS`` (and ``TANDEM_API_TOKENS_FILE``): the bearer tokens ``tandem api`` accepts;
    their tenants and scopes are ``api.tokens`` (a token listed only here: ``default``, no admin)."""
    api_max_body: int = 1_048_576
    """``TANDEM_API_MAX_BODY``: the largest request body ``tandem api`` reads, in bytes."""
    api: ApiSettings = field(default_factory=ApiSettings)
    task_events: bool = False
    """``TANDEM_TASK_EVENTS``: workers send Celery task events from the start (a ``PUBLISH`` each)."""
    broker_ack_emulation: bool | None = None
    """``TANDEM_BROKER_ACK_EMULATION`` (Redis broker): whether kombu keeps each message a worker holds
    in an "unacked" hash until its task ends (8 more Redis commands per message). Unset: only for
    the intake queue (``tandem.infer`` from bare clients, ``decide``, ``resume``, ``fork``); the
    step queues need none, the reconciler sends a step again when its message is lost
    (``tandem.broker_config.transport``). ``true``: for every queue (kombu's own transport).
    ``false``: for none (an intake message held by a killed worker is then lost)."""
    model_loop: bool = True
    """``TANDEM_MODEL_LOOP``: a worker's LiteLLM calls run on one asyncio loop per process while the
    step threads wait (less CPU per call than hundreds of threads each in its own HTTP call). Off:
    each call runs in its step's thread. Under gevent, and for the demo model, calls never use it."""
    direct_http: bool = True
    """``TANDEM_DIRECT_HTTP``: on the model loop, a non-streamed call to an OpenAI-compatible host
    (model ``openai/<name>`` or ``hosted_vllm/<name>`` with an ``API_BASE``) is posted to it
    directly, not through LiteLLM (the same request and reply for about a sixth of the CPU; see
    ``tandem.reasoner.models.direct_http``). Off: every call goes through LiteLLM."""
    retry_hold_seconds: float = 5.0
    """``TANDEM_RETRY_HOLD_SECONDS``: the most seconds a worker's model call waits between its own
    retries, in all (``Retry-After`` or back-off). A longer wait parks the step (state ``waiting``,
    no thread held) and sends it again with a countdown."""
    rate_burst_seconds: float = 1.0
    """``TANDEM_RATE_BURST_SECONDS``: how many seconds' worth of ``TANDEM_<ROLE>_RPM``/``_TPM`` may
    go to a host at once (a request budget: at least one request); the rest is paced, and no 60 s
    window gets more than the limit (``tandem.tasks.hosts.rate_buckets``)."""
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)  # TANDEM_WEBHOOK_*
    rabbitmq_queue_type: Literal["classic", "quorum"] = "classic"  # TANDEM_RABBITMQ_QUEUE_TYPE (quorum)
    children: ChildSettings = field(default_factory=ChildSettings)  # TANDEM_SPAWN_*, TANDEM_CHILD_*

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and check the ``TANDEM_*`` variables; errors name the variable and the value."""
        env = os.environ if env is None else env
        refuse_cluster(env, "TANDEM_BROKER_URL", "Celery's broker", "one Redis or RabbitMQ (amqp://)")
        broker, redis_url, backend = read_urls(env, DEFAULT_URL)
        queue, lanes = read_intake(env)  # TANDEM_INTAKE_QUEUE, TANDEM_INTAKE_LANES
        lease = _number(env, "TANDEM_LEASE_SECONDS", 30.0, minimum=1.0) or 30.0
        limit = _number(env, "TANDEM_TASK_TIME_LIMIT", 900.0, minimum=10.0) or 900.0
        stall = _number(env, "TANDEM_STALL_SECONDS", max(60.0, 2 * lease), minimum=1.0) or 60.0
        job_timeout = _number(env, "TANDEM_JOB_TIMEOUT", 3600.0, minimum=1.0) or 3600.0
        return cls(
            broker_url=broker,
            result_backend=backend,
            redis_url=redis_url,
            toolkit=env.get("TANDEM_TOOLKIT", "").strip() or None,
            intake_queue=queue,
            intake_lanes=lanes,
            thinker=RoleSettings.from_env("thinker", env),
            actor=RoleSettings.from_env("actor", env),
            task_time_limit=limit,
            lease_seconds=lease,
            stall_seconds=stall,
            job_timeout=job_timeout,
            result_expires=_integer(env, "TANDEM_RESULT_EXPIRES", 86400, minimum=60),
            memory_ttl=_memory_ttl(env, broker, limit, lease),
            tool_timeout=_number(env, "TANDEM_TOOL_TIMEOUT", 60.0, minimum=0.1) or 60.0,
            max_output_chars=_integer(env, "TANDEM_MAX_OUTPUT_CHARS", 8000, minimum=100),
            artifact_bytes=_integer(env, "TANDEM_ARTIFACT_BYTES", 8000, minimum=0),
            prefix=env.get("TANDEM_PREFIX", "").strip() or "tandem",
            limits=Limits.from_env(env),
            tool_policy=env.get("TANDEM_TOOL_POLICY", "").strip() or None,
            redis_socket_timeout=_number(env, "TANDEM_REDIS_SOCKET_TIMEOUT", 30.0, minimum=2.0) or 30.0,
            redis_connect_timeout=_number(env, "TANDEM_REDIS_CONNECT_TIMEOUT", 10.0, minimum=0.5) or 10.0,
            secrets_key=_secrets_key(env),
            signing=read_signing(env, _integer(env, "TANDEM_SIGNING_MAX_AGE", 3600, minimum=10)),
            redis_max_connections=_optional_integer(env, "TANDEM_REDIS_MAX_CONNECTIONS"),
            redis_pool_timeout=_number(env, "TANDEM_REDIS_POOL_TIMEOUT", 20.0, minimum=0.1) or 20.0,
            redis_wait_replicas=_integer(env, "TANDEM_REDIS_WAIT_REPLICAS", 0, minimum=0),
            redis_wait_timeout_ms=_wait_timeout(env),
            metrics_port=_metrics_port(env),
            events_maxlen=_integer(env, "TANDEM_EVENTS_MAXLEN", 10000, minimum=100),
            deltas=_flag(env, "TANDEM_EVENT_DELTAS") is not False,
            compaction=CompactionSettings.from_env(env),
            delta_interval_ms=_integer(env, "TANDEM_DELTA_INTERVAL_MS", 100, minimum=0),
            delta_max_chars=_integer(env, "TANDEM_DELTA_MAX_CHARS", 512, minimum=1),
            api_tokens=tuple(t.token for t in read_tokens(env)),
            api_max_body=_integer(env, "TANDEM_API_MAX_BODY", 1_048_576, minimum=1024),
            api=ApiSettings.from_env(env),
            task_events=_flag(env, "TANDEM_TASK_EVENTS") is True,
            broker_ack_emulation=_flag(env, "TANDEM_BROKER_ACK_EMULATION"),
            model_loop=_flag(env, "TANDEM_MODEL_LOOP") is not False,
            direct_http=_flag(env, "TANDEM_DIRECT_HTTP") is not False,
            retry_hold_seconds=_number(env, "TANDEM_RETRY_HOLD_SECONDS", 5.0, minimum=0.0) or 0.0,
            rate_burst_seconds=_burst_seconds(env),
            rabbitmq_queue_type=_queue_type(env, broker),
            webhooks=WebhookSettings.from_env(env),
            children=ChildSettings.from_env(env),
        )

    def register_secrets(self) -> None:
        """Have ``tandem.toolkit.redaction`` mask this configuration's credentials wherever they appear:
        the model API keys, the passwords in the Redis URLs, the secrets key and the role API bases
        (which may carry credentials of their own)."""
        from tandem.toolkit.redaction import register_secret, register_url

        for url in (self.broker_url, self.result_backend, self.redis_url):
            register_url(url)
            if is_sentinel_url(url):  # decoded, and the Sentinels' own password (in the query)
                register_secret(SentinelUrl.parse(url).password, SentinelUrl.parse(url).sentinel_password)
        for conf in (self.thinker, self.actor):
            register_secret(conf.api_key)
            register_url(conf.api_base)
        register_secret(self.secrets_key)
        self.webhooks.register_secrets()

    def role(self, name: str) -> RoleSettings:
        """The settings of ``thinker`` or ``actor``."""
        if name == "thinker":
            return self.thinker
        if name == "actor":
            return self.actor
        raise SettingsError(f"unknown role {name!r}: roles are thinker and actor")

    def host_limits(self, name: str) -> tuple[str, int | None, int | None, int | None]:
        """``(host, max_in_flight, rpm, tpm)`` of the host ``name``'s role calls.

        Roles that call the same host share its limits: each limit is the smallest one either
        role sets, so ``TANDEM_THINKER_MAX_IN_FLIGHT=8`` caps the Actor's calls too when both
        roles use one ``API_BASE``.
        """
        conf = self.role(name)
        sharing = [r for r in (self.thinker, self.actor) if r.host_id == conf.host_id]

        def smallest(values: list[int | None]) -> int | None:
            given = [v for v in values if v is not None]
            return min(given) if given else None

        return (
            conf.host_id,
            smallest([r.max_in_flight for r in sharing]),
            smallest([r.rpm for r in sharing]),
            smallest([r.tpm for r in sharing]),
        )

    @property
    def visibility_timeout(self) -> int:
        """The Redis broker's visibility timeout (see ``visibility_timeout``); ``memory_ttl`` is
        never below it with a Redis broker."""
        return visibility_timeout(self.task_time_limit, self.lease_seconds)

    def with_urls(self, url: str) -> Settings:
        """The same settings with broker, backend and Redis all at ``url`` (the embedded runtime)."""
        return replace(self, broker_url=url, result_backend=url, redis_url=url)


LOOPBACK_ADDRESSES = ("127.0.0.1", "::1", "localhost")


def flower_basic_auth(env: Mapping[str, str] | None = None, file: str | None = None) -> str | None:
    """Flower's ``user:password[,user:password]`` from ``file`` (or ``FLOWER_BASIC_AUTH_FILE``), else from
    ``FLOWER_BASIC_AUTH``; ``None`` when neither is set. ``SettingsError`` for a malformed value
    (the message never quotes the password)."""
    env = os.environ if env is None else env
    path = file or env.get("FLOWER_BASIC_AUTH_FILE", "").strip()
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                raw = handle.read().strip()
        except OSError as exc:
            raise SettingsError(
                f"Flower's credentials file {path!r} cannot be read: {exc.strerror}"
            ) from None
        where = f"the credentials file {path!r}"
    else:
        raw = env.get("FLOWER_BASIC_AUTH", "").strip()
        where = "FLOWER_BASIC_AUTH"
    if not raw:
        return None
    for entry in raw.split(","):
        user, sep, password = entry.strip().partition(":")
        if not sep or not user or len(password) < 8:
            raise SettingsError(
                f"{where} must hold user:password pairs (comma-separated) with passwords of at least 8 "
                f"characters; the entry for user {user!r} does not"
            )
    return raw
