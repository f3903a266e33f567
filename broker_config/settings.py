"""``Settings``: every environment variable tandem reads, read once and validated here.

Nothing else in tandem calls ``os.getenv``: the rest receives these values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from tandem.broker_config.errors import SettingsError

DEFAULT_URL = "redis://127.0.0.1:6379/0"
ROLE_NAMES = ("thinker", "actor")
RoleName = Literal["thinker", "actor"]


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


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}={raw!r} is not a yes/no value: use true or false, or leave it unset")


def _function_calling(env: Mapping[str, str], name: str) -> Literal["native", "prompt"] | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if raw in ("native", "prompt"):
        return raw  # type: ignore[return-value]
    raise SettingsError(
        f"{name}={raw!r} must be 'native' (tools= in the request) or 'prompt' (<function_call> blocks)"
    )


def _url(env: Mapping[str, str], name: str, default: str, schemes: tuple[str, ...]) -> str:
    raw = env.get(name, "").strip() or default
    if not raw.startswith(tuple(f"{s}://" for s in schemes)):
        allowed = ", ".join(f"{s}://" for s in schemes)
        raise SettingsError(
            f"{name}={raw!r} is not a supported URL: it must start with one of {allowed}"
        )
    return raw


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
    thinking: bool | None = None
    function_calling: Literal["native", "prompt"] | None = None
    """How ReAct jobs ask for tools: the host's native tool calls, or ``<function_call>`` blocks."""

    @classmethod
    def from_env(cls, role: RoleName, env: Mapping[str, str]) -> RoleSettings:
        """Read ``TANDEM_<ROLE>_MODEL``, ``_API_BASE``, ``_API_KEY``, ``_REASONING_PARSER``,
        ``_TEMPERATURE``, ``_MAX_TOKENS``, ``_TIMEOUT``, ``_THINKING`` and ``_FUNCTION_CALLING``."""
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
            raw = env[f"{p}TEMPERATURE"].strip()
            raise SettingsError(f"{p}TEMPERATURE={raw!r} must be between 0 and 2")
        max_tokens = env.get(f"{p}MAX_TOKENS", "").strip()
        api_base = env.get(f"{p}API_BASE", "").strip() or None
        if api_base and not api_base.startswith(("http://", "https://")):
            raise SettingsError(f"{p}API_BASE={api_base!r} must be an http:// or https:// URL")
        return cls(
            role=role,
            model=env.get(f"{p}MODEL", "").strip() or None,
            api_base=api_base,
            api_key=env.get(f"{p}API_KEY", "").strip() or None,
            reasoning_parser=parser,
            temperature=temperature,
            max_tokens=_integer(env, f"{p}MAX_TOKENS", 0, minimum=1) if max_tokens else None,
            timeout=_number(env, f"{p}TIMEOUT", 120.0, minimum=1.0) or 120.0,
            thinking=_flag(env, f"{p}THINKING"),
            function_calling=_function_calling(env, f"{p}FUNCTION_CALLING"),
        )

    @property
    def is_demo(self) -> bool:
        """True when no model is configured and the offline demo model stands in."""
        return self.model is None


@dataclass(frozen=True)
class Settings:
    """All of tandem's configuration. Build it with ``Settings.from_env()``.

    ``lease_seconds`` bounds how long a step whose worker died waits before another worker takes
    it over; ``task_time_limit`` is the hard limit of one step, and the broker's visibility
    timeout is set above it so Redis never hands out a step that is still running.
    """

    broker_url: str = DEFAULT_URL
    result_backend: str = DEFAULT_URL
    redis_url: str = DEFAULT_URL
    toolkit: str | None = None
    intake_queue: str = "celery"
    thinker: RoleSettings = field(default_factory=lambda: RoleSettings("thinker"))
    actor: RoleSettings = field(default_factory=lambda: RoleSettings("actor"))
    task_time_limit: float = 900.0
    lease_seconds: float = 30.0
    result_expires: int = 86400
    memory_ttl: int = 86400
    tool_timeout: float = 60.0
    max_output_chars: int = 8000
    prefix: str = "tandem"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and check the ``TANDEM_*`` variables; errors name the variable and the value."""
        env = os.environ if env is None else env
        broker = _url(
            env, "TANDEM_BROKER_URL", DEFAULT_URL, ("redis", "rediss", "redis+socket", "amqp", "pyamqp")
        )
        # A Unix socket is ``redis+socket://`` to Celery and ``unix://`` to redis-py: a default taken
        # from the other variable is translated, never rejected under a variable nobody set.
        if broker.startswith(("redis://", "rediss://")):
            redis_default = broker
        elif broker.startswith("redis+socket://"):
            redis_default = "unix://" + broker.removeprefix("redis+socket://")
        else:
            redis_default = DEFAULT_URL
        redis_url = _url(env, "TANDEM_REDIS_URL", redis_default, ("redis", "rediss", "unix"))
        backend_default = redis_url
        if redis_url.startswith("unix://"):
            backend_default = "redis+socket://" + redis_url.removeprefix("unix://")
        backend = _url(env, "TANDEM_RESULT_BACKEND", backend_default, ("redis", "rediss", "redis+socket"))
        queue = env.get("TANDEM_INTAKE_QUEUE", "").strip() or "celery"
        if queue in ("thinker", "actor", "tools"):
            raise SettingsError(
                f"TANDEM_INTAKE_QUEUE={queue!r} clashes with a role queue: pick another name"
            )
        lease = _number(env, "TANDEM_LEASE_SECONDS", 30.0, minimum=1.0) or 30.0
        limit = _number(env, "TANDEM_TASK_TIME_LIMIT", 900.0, minimum=10.0) or 900.0
        return cls(
            broker_url=broker,
            result_backend=backend,
            redis_url=redis_url,
            toolkit=env.get("TANDEM_TOOLKIT", "").strip() or None,
            intake_queue=queue,
            thinker=RoleSettings.from_env("thinker", env),
            actor=RoleSettings.from_env("actor", env),
            task_time_limit=limit,
            lease_seconds=lease,
            result_expires=_integer(env, "TANDEM_RESULT_EXPIRES", 86400, minimum=60),
            memory_ttl=_integer(env, "TANDEM_MEMORY_TTL", 86400, minimum=60),
            tool_timeout=_number(env, "TANDEM_TOOL_TIMEOUT", 60.0, minimum=0.1) or 60.0,
            max_output_chars=_integer(env, "TANDEM_MAX_OUTPUT_CHARS", 8000, minimum=100),
            prefix=env.get("TANDEM_PREFIX", "").strip() or "tandem",
        )

    def role(self, name: str) -> RoleSettings:
        """The settings of ``thinker`` or ``actor``."""
        if name == "thinker":
            return self.thinker
        if name == "actor":
            return self.actor
        raise SettingsError(f"unknown role {name!r}: roles are thinker and actor")

    def with_urls(self, url: str) -> Settings:
        """The same settings with broker, backend and Redis all at ``url`` (the embedded runtime)."""
        return replace(self, broker_url=url, result_backend=url, redis_url=url)
